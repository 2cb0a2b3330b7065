"""The `openai` backend: any OpenAI-compatible chat-completions endpoint (vLLM server, hosted API).

Requests go through the official `openai` SDK, which owns the transport: a
timeout per request, and retries with exponential backoff (honouring
`Retry-After`) on connection errors, timeouts, HTTP 408, 409, 429 and 5xx.
Errors name the URL. Tool results are sent as user turns
wrapped in `<tool_response>` (Hermes style), so any server accepts them; tool
calls the server parsed into `tool_calls` come back as `<tool_call>` text, so
the one parser reads every backend's output.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import openai

from librarian.models.base import (
    BackendError,
    Message,
    Sample,
    SamplingParams,
    ToolSchema,
    check_conversations,
    cut_at_stop,
    derive_seed,
)
from librarian.models.chat import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    chatml,
    render_with_template,
    with_tools_in_system,
)
from librarian.redact import redact_text, redact_url

log = logging.getLogger(__name__)
RETRY_STATUS = {408, 409, 429}  # what the SDK retries, with every 5xx
# chat.completions.create's own parameters; vLLM's extras (token ids) travel in `extra_body`
MAX_JSON_DEPTH = 64  # tool-call arguments nested deeper are refused (the tool-call parser and schemas recurse)
MAX_BODY_DEPTH = 256  # a reply nested deeper is refused before parsing (json.loads recurses: it would overflow)
STANDARD_KEYS = ("model", "messages", "n", "max_tokens", "temperature", "top_p", "logprobs", "tools", "tool_choice",
                 "stop", "seed")


class OpenAIBackend:
    """`PolicyBackend` over `POST {base_url}/chat/completions`.

    `tools_in_prompt=True` writes the tool schemas into the system message
    (for servers whose template ignores `tools`); otherwise they are sent as
    `tools` with `tool_choice: "none"`, so the server renders but never parses
    them. `tokenizer` (optional) lets `render_prompt` use the model's own
    template; without it, ChatML is shown.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 60.0,
                 max_retries: int = 3, tools_in_prompt: bool = False,
                 tokenizer: Any = None, extra_body: dict[str, Any] | None = None) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise BackendError(f"openai backend: base_url must start with http:// or https://, got {base_url!r}")
        if max_retries < 0 or timeout_s <= 0:
            raise BackendError(f"openai backend: need timeout_s > 0 and max_retries >= 0, got {timeout_s}, {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.tools_in_prompt = tools_in_prompt
        self.tokenizer = tokenizer
        self.extra_body = dict(extra_body or {})
        self.name = f"openai:{model}@{redact_url(self.base_url)}"  # names go to logs and results: no credential
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The SDK client (made on first use: a backend stays cheap to build and to pickle before it)."""
        if self._client is None:
            key = self.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # local servers need none
            self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s,
                                         max_retries=self.max_retries)
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}  # the SDK client holds a connection pool

    @property
    def url(self) -> str:
        """The endpoint as errors show it (a password in the URL masked)."""
        return redact_url(f"{self.base_url}/chat/completions")

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        msgs = wire_messages(check_conversations([messages])[0])
        if self.tokenizer is not None:
            return render_with_template(self.tokenizer, msgs, tools)
        return chatml(msgs, tools)

    def generate(self, conversations: Sequence[Sequence[Message]], tools: Sequence[ToolSchema] | None,
                 params: SamplingParams) -> list[list[Sample]]:
        return [self._one(conv, tools, params, i) for i, conv in enumerate(check_conversations(conversations))]

    def request_body(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None,
                     params: SamplingParams, index: int = 0) -> dict[str, Any]:
        """The JSON body sent for conversation `index` of a `generate` call.

        With `params.seed`, the request's seed is `derive_seed(params.seed, index)`: servers seed each
        request separately, so identical conversations of one call must not share a seed (the server
        derives its `n` samples' seeds from it)."""
        msgs = wire_messages(messages)
        body: dict[str, Any] = {
            "model": self.model, "n": params.n, "max_tokens": params.max_new_tokens,
            "temperature": float(params.temperature), "top_p": float(params.top_p),
            "logprobs": True, "return_token_ids": True, "return_tokens_as_token_ids": True,
        }
        if tools and self.tools_in_prompt:
            msgs = with_tools_in_system(msgs, tools)
        elif tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "none"
        body["messages"] = msgs
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = derive_seed(params.seed, index)
        body.update(self.extra_body)
        return body

    def _one(self, messages: list[Message], tools: Sequence[ToolSchema] | None, params: SamplingParams,
             index: int = 0) -> list[Sample]:
        data = self._post(self.request_body(messages, tools, params, index))
        choices = data.get("choices")
        if not isinstance(choices, list) or len(choices) != params.n:
            raise BackendError(f"{self.url}: expected {params.n} choice(s), got {str(choices)[:200]}")
        prompt_ids = tuple(_ints(data.get("prompt_token_ids")) or ())
        return [self._sample(sorted(choices, key=lambda c: c.get("index", 0))[k], prompt_ids, params)
                for k in range(params.n)]

    def _sample(self, choice: dict[str, Any], prompt_ids: tuple[int, ...], params: SamplingParams) -> Sample:
        message = choice.get("message")
        if not isinstance(message, dict):
            raise BackendError(f"{self.url}: a choice has no message: {str(choice)[:200]}")
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise BackendError(f"{self.url}: message content must be a string, got {type(text).__name__}")
        calls = message.get("tool_calls") or []
        errors = []
        for call in calls if isinstance(calls, list) else [calls]:
            try:
                text += tool_call_text(call)
            except BackendError as exc:  # this conversation's turn fails as a malformed call; the batch goes on
                errors.append(f"{self.url}: {exc}")
                log.warning("%s: %s", self.url, exc)
                text += f"{TOOL_CALL_OPEN}(not a tool call: the server's tool call was malformed: {exc}){TOOL_CALL_CLOSE}"
        stop_reason = choice.get("stop_reason")
        if isinstance(stop_reason, str) and stop_reason in params.stop and not text.endswith(stop_reason):
            text += stop_reason  # servers drop the stop string; the contract keeps it
        text, _ = cut_at_stop(text, params.stop)
        token_ids, logprobs = _tokens(choice)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return Sample(text=text, token_ids=token_ids, logprobs=logprobs if len(logprobs) == len(token_ids) else (),
                      prompt_token_ids=prompt_ids, finish_reason=finish,
                      extra={"finish_reason": choice.get("finish_reason"), **({"errors": errors} if errors else {})})

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Send one chat-completions body; the SDK retries, this names the URL in every error."""
        known = {k: body[k] for k in STANDARD_KEYS if k in body}
        extra = {k: v for k, v in body.items() if k not in STANDARD_KEYS}
        attempts = self.max_retries + 1
        try:
            raw = self.client.chat.completions.with_raw_response.create(**known, extra_body=extra or None)
        except openai.APIStatusError as exc:
            last = redact_text(f"HTTP {exc.status_code}: {exc.response.text[:500]}")  # a server may echo a key
            if exc.status_code not in RETRY_STATUS and exc.status_code < 500:
                raise BackendError(f"{self.url} rejected the request ({last})") from exc
            raise BackendError(f"{self.url}: giving up after {attempts} attempt(s); last error: {last}") from exc
        except openai.APIConnectionError as exc:  # APITimeoutError included
            reason = redact_text(str(exc.__cause__ or exc))
            raise BackendError(f"{self.url}: giving up after {attempts} attempt(s); last error: "
                               f"unreachable ({reason})") from exc
        text = raw.http_response.text
        if json_depth(text) > MAX_BODY_DEPTH:
            raise BackendError(f"{self.url} returned JSON nested deeper than {MAX_BODY_DEPTH} levels")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BackendError(f"{self.url} returned a body that is not JSON: {text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise BackendError(f"{self.url} returned JSON that is not an object: {str(data)[:200]}")
        return data


def json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in a JSON text (strings skipped), without recursing."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def tool_call_text(call: Any) -> str:
    """A tool call the server parsed (`{"function": {"name", "arguments"}}`) as `<tool_call>` text for the one
    parser; a `BackendError` naming what is malformed (not an object, a `function` that is not one, arguments
    nested deeper than `MAX_JSON_DEPTH`)."""
    if not isinstance(call, dict):
        raise BackendError(f"a tool call is a {type(call).__name__}, not an object")
    fn = call.get("function", {})
    if not isinstance(fn, dict):
        raise BackendError(f"a tool call's 'function' is a {type(fn).__name__}, not an object")
    raw = fn.get("arguments")
    if not isinstance(raw, str):
        try:
            raw = json.dumps({} if raw is None else raw)
        except (TypeError, ValueError, RecursionError) as exc:
            raise BackendError(f"a tool call's arguments cannot be written as JSON ({type(exc).__name__})") from None
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise BackendError(f"a tool call's arguments nest deeper than {MAX_JSON_DEPTH} levels")
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError:
        args = raw  # kept as text: the parser rejects it as the model's bad call
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': fn.get('name'), 'arguments': args})}{TOOL_CALL_CLOSE}"


def wire_messages(messages: Sequence[Message]) -> list[Message]:
    """Tool results as user turns in `<tool_response>` tags (no tool_call_id bookkeeping needed)."""
    out: list[Message] = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def _tokens(choice: dict[str, Any]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Generated token ids and log-probs, from `token_ids` or `logprobs.content` ("token_id:N" tokens)."""
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = tuple(float(c["logprob"]) for c in content if isinstance(c, dict) and "logprob" in c)
    ids = _ints(choice.get("token_ids"))
    if ids is None:
        parsed = []
        for c in content:
            token = c.get("token", "") if isinstance(c, dict) else ""
            if not (isinstance(token, str) and token.startswith("token_id:") and token[9:].lstrip("-").isdigit()):
                return (), ()
            parsed.append(int(token[9:]))
        ids = parsed
    return tuple(ids), logprobs
