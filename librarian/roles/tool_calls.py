"""Parse model output into tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes/Qwen).

Robust by contract: `ToolCallParser.parse` never raises. Every problem
becomes a typed `CallError` (which the episode loop turns into an error
observation costing one action):

- `no_call`: the message holds no `<tool_call>` block;
- `bad_json`: a block is not valid JSON;
- `bad_call`: the JSON is not an object with a string `name` and an object `arguments`;
- `unknown_tool`: the name is not one of this role's tools;
- `bad_arguments`: the arguments fail the tool's JSON schema;
- `too_many_calls`: more blocks than the role allows in one turn (none of them runs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from jsonschema.exceptions import best_match

from librarian.models.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

ErrorKind = Literal["no_call", "bad_json", "bad_call", "unknown_tool", "bad_arguments", "too_many_calls"]
ERROR_KINDS: tuple[str, ...] = ("no_call", "bad_json", "bad_call", "unknown_tool", "bad_arguments", "too_many_calls")
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.S)
_FENCE = re.compile(r"\A```(?:json)?\s*(.*?)\s*```\Z", re.S)
_SHOWN = 160  # characters of offending text quoted back in an error


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A well-formed call of a known tool with schema-valid arguments."""

    name: str
    arguments: dict[str, Any]
    raw: str = ""


@dataclass(frozen=True, slots=True)
class CallError:
    """A malformed or disallowed call; `observation()` is what the agent sees."""

    kind: ErrorKind
    message: str
    raw: str = ""
    name: str | None = None

    def observation(self) -> str:
        return f"error ({self.kind}): {self.message}"


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """The calls and errors of one assistant message, in order; `content` is the text outside the blocks."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[CallError, ...] = ()
    content: str = ""
    items: tuple[ToolCall | CallError, ...] = field(default=(), repr=False)


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of OpenAI-format tool schemas."""
    return [t["function"]["name"] for t in tools]


class ToolCallParser:
    """Parses assistant messages against a set of OpenAI-format tool schemas."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], max_calls: int = 1) -> None:
        if max_calls < 1:
            raise ValueError(f"max_calls must be at least 1, got {max_calls}")
        self.max_calls = max_calls
        self._validators: dict[str, Any] = {}
        for tool in tools:
            fn = tool["function"]
            schema = fn.get("parameters") or {"type": "object"}
            jsonschema.Draft202012Validator.check_schema(schema)
            self._validators[fn["name"]] = jsonschema.Draft202012Validator(schema)
        self.names = tuple(self._validators)

    def parse(self, text: object) -> ParsedTurn:
        """The calls in `text`; never raises."""
        try:
            return self._parse(text if isinstance(text, str) else "")
        except Exception as exc:  # the contract: a model's output can never crash the loop
            error = CallError("bad_call", f"the message could not be read as a tool call ({type(exc).__name__})",
                              _short(str(text)))
            return ParsedTurn(errors=(error,), items=(error,))

    def _parse(self, text: str) -> ParsedTurn:
        blocks = list(_BLOCK.finditer(text))
        content = _BLOCK.sub("", text).strip()
        if not blocks:
            error = CallError("no_call", "no tool call found; write exactly one call as "
                              f'{TOOL_CALL_OPEN}{{"name": ..., "arguments": {{...}}}}{TOOL_CALL_CLOSE}'
                              f" using one of: {', '.join(self.names)}", _short(text))
            return ParsedTurn(errors=(error,), content=content, items=(error,))
        if len(blocks) > self.max_calls:
            allowed = "one call" if self.max_calls == 1 else f"at most {self.max_calls} calls"
            error = CallError("too_many_calls", f"{len(blocks)} tool calls in one message; {allowed} per turn is "
                              "allowed, so none was run", _short(text))
            return ParsedTurn(errors=(error,), content=content, items=(error,))
        items = tuple(self._one(m.group(1)) for m in blocks)
        return ParsedTurn(calls=tuple(i for i in items if isinstance(i, ToolCall)),
                          errors=tuple(i for i in items if isinstance(i, CallError)), content=content, items=items)

    def _one(self, inner: str) -> ToolCall | CallError:
        body = inner.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:
            where = f" at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
            return CallError("bad_json", f"the tool call is not valid JSON{where}: {_short(body)!r}", _short(inner))
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return CallError("bad_call", 'a tool call must be a JSON object {"name": <tool>, "arguments": {...}}; '
                             f"got {_short(body)!r}", _short(inner))
        name = payload["name"]
        extra = sorted(set(payload) - {"name", "arguments"})
        if extra:
            return CallError("bad_call", f"unexpected key(s) {', '.join(map(repr, extra))} in the call; only "
                             "'name' and 'arguments'", _short(inner), name)
        if name not in self._validators:
            return CallError("unknown_tool", f"unknown tool {_short(name)!r}; the tools are: {', '.join(self.names)}",
                             _short(inner), name)
        args = payload.get("arguments", {})
        if isinstance(args, str):  # OpenAI style: arguments as a JSON string
            try:
                args = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):
                return CallError("bad_json", f"{name}: 'arguments' is a string that is not JSON: {_short(args)!r}",
                                 _short(inner), name)
        if not isinstance(args, dict):
            return CallError("bad_call", f"{name}: 'arguments' must be a JSON object, got {type(args).__name__}",
                             _short(inner), name)
        problem = best_match(self._validators[name].iter_errors(args))
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path)
            at = f" (at '{where}')" if where else ""
            return CallError("bad_arguments", f"{name}: {_short(problem.message)}{at}", _short(inner), name)
        return ToolCall(name, args, _short(inner))


def parse_tool_calls(text: object, tools: Sequence[Mapping[str, Any]], max_calls: int = 1) -> ParsedTurn:
    """One-off parse (build a `ToolCallParser` once when parsing many messages)."""
    return ToolCallParser(tools, max_calls).parse(text)
