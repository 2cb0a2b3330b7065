"""A small OpenAI-compatible chat-completions server over any `PolicyBackend` (stdlib `http.server`).

It serves `POST /v1/chat/completions`, `GET /v1/models` and `GET /health`
on loopback, so the `openai` backend can be tested against a real model
(the tiny hf model) over real HTTP. Like vLLM it returns `stop_reason`, and
with `return_token_ids` / `return_tokens_as_token_ids` the token ids.

    python -m librarian.models.openai_server --model tiny --port 8000
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from librarian.models.base import PolicyBackend, Sample, SamplingParams, check_conversations
from librarian.models.hf import make_hf_backend

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 8 * 1024 * 1024


class RequestError(ValueError):
    """The request body is invalid (answered with HTTP 400)."""


def sampling_params(body: dict[str, Any]) -> SamplingParams:
    """The sampling parameters of a chat-completions request body."""
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 256))
    try:
        return SamplingParams(n=body.get("n", 1), max_new_tokens=max_tokens, temperature=body.get("temperature", 1.0),
                              top_p=body.get("top_p", 1.0), stop=stop, seed=body.get("seed"))
    except ValueError as exc:
        raise RequestError(str(exc)) from exc


def completion(backend: PolicyBackend, body: dict[str, Any], model_name: str) -> dict[str, Any]:
    """Answer one chat-completions request body with the backend."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        messages = check_conversations([body.get("messages") or []])[0]
    except ValueError as exc:
        raise RequestError(f"messages: {exc}") from exc
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("tools must be a list of function schemas")
    params = sampling_params(body)
    samples = backend.generate([messages], tools, params)[0]
    with_ids = bool(body.get("return_token_ids"))
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    choices = [_choice(i, s, params, bool(body.get("logprobs")), with_ids, as_ids) for i, s in enumerate(samples)]
    prompt_ids = list(samples[0].prompt_token_ids) if samples else []
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
        "model": model_name, "choices": choices,
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": sum(len(s.token_ids) for s in samples),
                  "total_tokens": len(prompt_ids) + sum(len(s.token_ids) for s in samples)},
    }
    if with_ids:
        out["prompt_token_ids"] = prompt_ids
    return out


def _choice(index: int, sample: Sample, params: SamplingParams, logprobs: bool, with_ids: bool,
            as_ids: bool) -> dict[str, Any]:
    text, stop_reason = sample.text, None
    for stop in params.stop:
        if text.endswith(stop):  # OpenAI servers leave the stop string out of the content
            text, stop_reason = text[: -len(stop)], stop
            break
    choice: dict[str, Any] = {"index": index, "message": {"role": "assistant", "content": text},
                              "finish_reason": sample.finish_reason, "stop_reason": stop_reason}
    if logprobs and sample.logprobs:
        choice["logprobs"] = {"content": [
            {"token": f"token_id:{t}" if as_ids else str(t), "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(sample.token_ids, sample.logprobs, strict=True)]}
    else:
        choice["logprobs"] = None
    if with_ids:
        choice["token_ids"] = list(sample.token_ids)
    return choice


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str) -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        elif self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route {self.path}; use /v1/chat/completions", "not_found")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._error(413, f"body of {length} bytes is over {MAX_BODY_BYTES}", "invalid_request_error")
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
            with self.server.lock:
                payload = completion(self.server.backend, body, self.server.model_name)
        except (json.JSONDecodeError, RequestError) as exc:
            self._error(400, str(exc), "invalid_request_error")
            return
        except Exception as exc:  # the server must answer, whatever the backend did
            log.exception("generation failed")
            self._error(500, f"{type(exc).__name__}: {exc}", "server_error")
            return
        self._send(200, payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], backend: PolicyBackend, model_name: str) -> None:
        super().__init__(address, _Handler)
        self.backend = backend
        self.model_name = model_name
        self.lock = threading.Lock()  # one generation at a time: the model is not thread-safe


class RunningServer:
    """A server answering in a background thread; `url` is the OpenAI base URL (ends in /v1)."""

    def __init__(self, backend: PolicyBackend, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None):
        self._server = _Server((host, port), backend, model_name or backend.name)
        self._thread = threading.Thread(target=self._server.serve_forever, name="openai-server", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def model_name(self) -> str:
        return self._server.model_name

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(backend: PolicyBackend, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None) -> RunningServer:
    """Start serving `backend` (port 0 picks a free port); call `close()` when done."""
    return RunningServer(backend, host, port, model_name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve an hf backend over the OpenAI chat-completions API.")
    parser.add_argument("--model", default="smollm2", help="'smollm2', 'tiny', or a local checkpoint folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)

    server = serve(make_hf_backend(args.model), args.host, args.port)
    print(f"serving {server.model_name} at {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
