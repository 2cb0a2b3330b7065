"""The openai backend against a real OpenAI-compatible server on loopback, serving the tiny hf model."""

from __future__ import annotations

import json
import pickle
import socket
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from librarian.models import BackendError, SamplingParams, make_backend
from librarian.models.hf import smollm2_tokenizer
from librarian.models.openai import OpenAIBackend, wire_messages
from librarian.models.openai_server import serve
from librarian.roles.tool_calls import parse_tool_calls

CONV = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."},
        {"role": "assistant", "content": "<tool_call>{}</tool_call>"}, {"role": "tool", "content": "result text"}]


@pytest.fixture(scope="module")
def server(tiny):
    with serve(tiny, model_name="tiny") as running:
        yield running


def test_greedy_completion_matches_the_backend_token_for_token(server, tiny):
    client = OpenAIBackend(server.url, "tiny", timeout_s=60, max_retries=0)
    params = SamplingParams(n=2, max_new_tokens=12, temperature=0.0)
    remote = client.generate([CONV], None, params)[0]

    local = tiny.generate([wire_messages(CONV)], None, params)[0]
    assert len(remote) == 2
    for r, loc in zip(remote, local, strict=True):
        assert r.token_ids == loc.token_ids and r.prompt_token_ids == loc.prompt_token_ids
        assert r.text == loc.text and r.finish_reason == loc.finish_reason
        assert r.logprobs == pytest.approx(loc.logprobs, abs=1e-6)


def test_sampled_completion_with_seed_and_stop_keeps_the_stop(server, tiny):
    client = make_backend("openai", base_url=server.url, model="tiny")
    free = client.generate([CONV], None, SamplingParams(max_new_tokens=20, seed=7))[0][0]
    stop = free.text[len(free.text) // 2: len(free.text) // 2 + 2]
    cut = client.generate([CONV], None, SamplingParams(max_new_tokens=20, seed=7, stop=(stop,)))[0][0]
    assert cut.text.endswith(stop) and free.text.startswith(cut.text)
    assert cut.finish_reason == "stop" and len(cut.logprobs) == len(cut.token_ids) > 0


def test_tools_are_sent_to_the_server_and_rendered_there(server):
    tools = [{"type": "function", "function": {"name": "lookup", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    client = OpenAIBackend(server.url, "tiny")
    body = client.request_body(CONV, tools, SamplingParams())
    assert body["tools"] == tools and body["tool_choice"] == "none"
    assert body["messages"][-1] == {"role": "user", "content": "<tool_response>\nresult text\n</tool_response>"}
    sample = client.generate([CONV], tools, SamplingParams(max_new_tokens=3, seed=0))[0][0]

    prompt = smollm2_tokenizer().decode(list(sample.prompt_token_ids))
    assert '"name": "lookup"' in prompt and "<tool_response>" in prompt


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_error_names_the_url():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    client = OpenAIBackend(url, "m", timeout_s=2, max_retries=1)
    with pytest.raises(BackendError, match=f"{url}/chat/completions: giving up after 2 attempt"):
        client.generate([CONV], None, SamplingParams(max_new_tokens=2))


def test_bad_request_is_not_retried_and_names_the_url(server):
    client = OpenAIBackend(server.url, "tiny", max_retries=3, timeout_s=5)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"chat/completions rejected the request \(HTTP 400.*messages"):
        client._post({"model": "tiny", "messages": [{"role": "nobody", "content": 1}]})
    assert time.monotonic() - t0 < 2  # no backoff: a 400 is not retried


class _Flaky:
    """A backend that fails its first `failures` calls (the server answers HTTP 500), then delegates."""

    def __init__(self, backend, failures: int) -> None:
        self.backend, self.failures, self.name = backend, failures, "flaky"

    def render_prompt(self, messages, tools=None):
        return self.backend.render_prompt(messages, tools)

    def generate(self, conversations, tools, params):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("temporary failure")
        return self.backend.generate(conversations, tools, params)


def test_server_errors_are_retried_with_backoff(tiny):
    flaky = _Flaky(tiny, failures=2)
    with serve(flaky) as running:
        client = OpenAIBackend(running.url, "flaky", max_retries=2)
        sample = client.generate([CONV], None, SamplingParams(max_new_tokens=2, seed=0))[0][0]
        assert flaky.failures == 0 and len(sample.token_ids) == 2
        flaky.failures = 5
        with pytest.raises(BackendError, match="giving up after 3 attempt.*HTTP 500.*temporary failure"):
            client.generate([CONV], None, SamplingParams(max_new_tokens=2))


def test_server_health_models_and_unknown_route(server):
    with urllib.request.urlopen(server.url.replace("/v1", "/health"), timeout=5) as r:
        assert json.load(r) == {"status": "ok"}
    with urllib.request.urlopen(server.url + "/models", timeout=5) as r:
        assert json.load(r)["data"][0]["id"] == "tiny"
    client = OpenAIBackend(server.url.replace("/v1", "/nope"), "tiny", max_retries=0)
    with pytest.raises(BackendError, match="HTTP 404"):
        client.generate([CONV], None, SamplingParams(max_new_tokens=1))


def test_tool_calls_parsed_by_a_server_come_back_as_text():
    client = OpenAIBackend("http://127.0.0.1:1/v1", "m")
    choice = {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
              "tool_calls": [{"function": {"name": "read", "arguments": "{\"id\": \"f1\"}"}}]}}
    sample = client._sample(choice, (), SamplingParams())
    assert sample.text == '<tool_call>{"name": "read", "arguments": {"id": "f1"}}</tool_call>'


def test_bad_base_url_is_rejected():
    with pytest.raises(BackendError, match="base_url must start with http"):
        OpenAIBackend("localhost:8000", "m")


class _Recorder(BaseHTTPRequestHandler):
    """A server that records each request's headers and answers with `reply` (status, body)."""

    seen: list = []
    reply: tuple = (200, b"{}")
    delay_s: float = 0.0

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        type(self).seen.append(({k.lower(): v for k, v in self.headers.items()}, json.loads(self.rfile.read(length))))
        time.sleep(type(self).delay_s)
        reply = type(self).reply
        status, body = reply(type(self).seen[-1][1]) if callable(reply) else reply
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def recorder():
    handler = type("Handler", (_Recorder,), {"seen": [], "reply": (200, b"{}"), "delay_s": 0.0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_the_key_and_vllm_extras_reach_the_server_through_the_sdk(recorder):
    handler, url = recorder
    handler.reply = (200, json.dumps({"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop",
                                                   "token_ids": [5, 6]}], "prompt_token_ids": [1, 2]}).encode())
    client = OpenAIBackend(url, "m", api_key="sk-test", extra_body={"top_k": 3})
    sample = client.generate([CONV], None, SamplingParams(max_new_tokens=4, seed=1))[0][0]
    assert (sample.text, sample.token_ids, sample.prompt_token_ids) == ("hi", (5, 6), (1, 2))
    headers, body = handler.seen[-1]
    assert headers["authorization"] == "Bearer sk-test"
    assert body["top_k"] == 3 and body["return_token_ids"] is True and body["max_tokens"] == 4


def test_a_slow_server_times_out_and_is_retried(recorder):
    handler, url = recorder
    handler.delay_s = 2.0
    client = OpenAIBackend(url, "m", timeout_s=0.3, max_retries=1)
    with pytest.raises(BackendError, match=f"{url}/chat/completions: giving up after 2 attempt.*unreachable"):
        client.generate([CONV], None, SamplingParams(max_new_tokens=2))
    assert len(handler.seen) == 2  # the first try and one retry


def test_a_body_that_is_not_json_is_named(recorder):
    handler, url = recorder
    handler.reply = (200, b"<html>proxy page</html>")
    with pytest.raises(BackendError, match="not JSON.*proxy page"):
        OpenAIBackend(url, "m", max_retries=0).generate([CONV], None, SamplingParams(max_new_tokens=2))


def test_a_backend_pickles_before_and_after_use(recorder):
    handler, url = recorder
    handler.reply = (200, json.dumps({"choices": [{"index": 0, "message": {"content": "x"}}]}).encode())
    client = OpenAIBackend(url, "m", max_retries=0)
    client.generate([CONV], None, SamplingParams(max_new_tokens=2))
    again = pickle.loads(pickle.dumps(client))
    assert again.generate([CONV], None, SamplingParams(max_new_tokens=2))[0][0].text == "x"


def test_a_password_in_the_url_never_reaches_the_name_or_an_error():
    url = f"http://user:pw-{'s3cret'}@127.0.0.1:{_free_port()}/v1"
    client = OpenAIBackend(url, "m", timeout_s=2, max_retries=0)
    assert "s3cret" not in client.name and client.name.startswith("openai:m@http://")
    with pytest.raises(BackendError) as caught:
        client.generate([CONV], None, SamplingParams(max_new_tokens=2))
    assert "s3cret" not in str(caught.value) and "giving up after 1 attempt" in str(caught.value)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _malformed(tool_calls) -> dict:
    return {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
                                                                   "tool_calls": tool_calls}}


@pytest.mark.parametrize(("calls", "message"), [
    ([{"function": "read"}], "a tool call's 'function' is a str, not an object"),
    ([{"function": {"name": "read", "arguments": "[" * 100_000 + "]" * 100_000}}], "nest deeper than 64 levels"),
    ([{"function": {"name": "read", "arguments": {"id": _nested(70)}}}], "nest deeper than 64 levels"),
    (["read"], "a tool call is a str, not an object"),
])
def test_a_malformed_tool_call_is_the_backends_error_in_that_sample(calls, message):
    sample = OpenAIBackend("http://127.0.0.1:1/v1", "m")._sample(_malformed(calls), (), SamplingParams())
    assert len(sample.extra["errors"]) == 1 and message in sample.extra["errors"][0]
    assert sample.extra["errors"][0].startswith("http://127.0.0.1:1/v1/chat/completions: ")
    turn = parse_tool_calls(sample.text, [])
    assert not turn.calls and message in turn.errors[0].observation()  # the episode sees why its turn failed


def test_one_malformed_reply_fails_its_own_conversation_not_the_batch(recorder):
    handler, url = recorder
    good = {"function": {"name": "read", "arguments": "{\"id\": \"f1\"}"}}

    def reply(body):
        bad = "bad" in body["messages"][-1]["content"]
        return 200, json.dumps({"choices": [_malformed([{"function": "read"}] if bad else [good])]}).encode()

    handler.reply = reply
    convs = [[{"role": "user", "content": "good"}], [{"role": "user", "content": "bad"}],
             [{"role": "user", "content": "good again"}]]
    out = OpenAIBackend(url, "m", max_retries=0).generate(convs, None, SamplingParams(max_new_tokens=4))
    assert [s[0].text for s in out[::2]] == ['<tool_call>{"name": "read", "arguments": {"id": "f1"}}</tool_call>'] * 2
    assert "errors" not in out[0][0].extra and "'function' is a str" in out[1][0].extra["errors"][0]


def test_a_reply_nested_past_the_parser_is_refused_before_parsing(recorder):
    handler, url = recorder
    handler.reply = (200, b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    with pytest.raises(BackendError, match="nested deeper than 256 levels"):
        OpenAIBackend(url, "m", max_retries=0).generate([CONV], None, SamplingParams(max_new_tokens=2))
