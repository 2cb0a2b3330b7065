"""Rendering conversations: tool schemas into the system turn, and a ChatML fallback.

A chat template that knows about tools (Qwen, Hermes) renders them itself:
`render_with_template` passes `tools=` through. One that does not (SmolLM2)
gets the schemas written into its system message by `tools_system_text`, in
the Hermes convention the parser reads back (`<tool_call>{json}</tool_call>`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from librarian.models.base import (
    BackendError,
    FinishReason,
    Message,
    Sample,
    SamplingParams,
    ToolSchema,
    check_conversations,
    cut_at_stop,
)

END_OF_TURN = "<|im_end|>"

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_LISTINGS = ("schema", "signatures")


def tools_system_text(tools: Sequence[ToolSchema]) -> str:
    """Instructions listing the tools (one JSON schema per line) and the call format."""
    lines = [
        "# Tools",
        "",
        "You can call the functions below. Their signatures are JSON schemas inside <tools></tools>:",
        "<tools>",
    ]
    lines.extend(json.dumps(t, ensure_ascii=False, sort_keys=True) for t in tools)
    lines += [
        "</tools>",
        "",
        "To call a function, write a JSON object with its name and arguments between the tags:",
        f'{TOOL_CALL_OPEN}{{"name": "<function name>", "arguments": {{<arguments>}}}}{TOOL_CALL_CLOSE}',
    ]
    return "\n".join(lines)


def _argument(name: str, schema: dict[str, Any], required: bool) -> str:
    kind = schema.get("type", "")
    if kind == "array":
        kind = f"list of {schema.get('items', {}).get('type', 'value')}"
    return f"{name}{'' if required else '?'}: {kind}" if kind else f"{name}{'' if required else '?'}"


def tools_signature_text(tools: Sequence[ToolSchema]) -> str:
    """The tools as one short line each, `name(arg: type, opt?: type): description`, and the call format:
    a few tokens a tool where `tools_system_text` spends a hundred or more (for calls sampled under the
    tools' grammar, which enforces the schemas the text leaves out)."""
    lines = ["# Tools", ""]
    for tool in tools:
        fn = tool["function"]
        params = fn.get("parameters") or {}
        required = set(params.get("required", []))
        args = ", ".join(_argument(n, p if isinstance(p, dict) else {}, n in required)
                         for n, p in (params.get("properties") or {}).items())
        about = str(fn.get("description", "")).strip()
        lines.append(f"- {fn['name']}({args})" + (f": {about}" if about else ""))
    lines += ["", "To call a function, write a JSON object with its name and arguments between the tags:",
              f'{TOOL_CALL_OPEN}{{"name": "<function name>", "arguments": {{<arguments>}}}}{TOOL_CALL_CLOSE}']
    return "\n".join(lines)


def with_tools_in_system(messages: Sequence[Message], tools: Sequence[ToolSchema] | None,
                         listing: str = "schema") -> list[Message]:
    """A copy of `messages` whose system message (added if missing) ends with the tool instructions
    (`listing`: `schema`, one JSON schema a line, or `signatures`, `tools_signature_text`)."""
    msgs = [dict(m) for m in messages]
    if not tools:
        return msgs
    if listing not in TOOL_LISTINGS:
        raise BackendError(f"tool listing must be one of {', '.join(TOOL_LISTINGS)}, got {listing!r}")
    block = tools_signature_text(tools) if listing == "signatures" else tools_system_text(tools)
    if msgs and msgs[0]["role"] == "system":
        msgs[0]["content"] = f"{msgs[0]['content']}\n\n{block}" if msgs[0]["content"] else block
    else:
        msgs.insert(0, {"role": "system", "content": block})
    return msgs


def template_supports_tools(template: str | None) -> bool:
    """True if a Jinja chat template reads the `tools` variable."""
    return bool(template) and "tools" in template  # type: ignore[operator]


def render_with_template(tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSchema] | None,
                         add_generation_prompt: bool = True) -> str:
    """Render with the tokenizer's own chat template (tools inline if the template cannot take them)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return chatml(messages, tools, add_generation_prompt)
    if tools and template_supports_tools(template):
        return tokenizer.apply_chat_template(list(messages), tools=list(tools), tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    return tokenizer.apply_chat_template(with_tools_in_system(messages, tools), tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def chatml(messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None,
           add_generation_prompt: bool = True) -> str:
    """ChatML (`<|im_start|>role\\ncontent<|im_end|>`): the fallback when no tokenizer is at hand."""
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in with_tools_in_system(messages, tools)]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def end_token_ids(tokenizer: Any, name: str = "") -> list[int]:
    """The ids that end a turn: `<|im_end|>` and the eos token (whichever the tokenizer has)."""
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    ends = {i for i in (end, tokenizer.eos_token_id) if isinstance(i, int) and i >= 0}
    if end == getattr(tokenizer, "unk_token_id", None):
        ends.discard(end)
    if not ends:
        raise BackendError(f"{name + ': ' if name else ''}the tokenizer has neither {END_OF_TURN} nor an eos token")
    return sorted(ends)


class TemplatePrompts:
    """`render_prompt` / `encode_prompt` through the model's own chat template (`self.tokenizer`).

    Shared by the backends that tokenize locally (`hf`, `vllm`), so both see
    byte-identical prompts for the same conversation.
    """

    tokenizer: Any
    end_ids: Sequence[int]  # the end-of-turn token ids (`end_token_ids`)

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        return render_with_template(self.tokenizer, check_conversations([messages])[0], tools)

    def encode_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> list[int]:
        """The prompt's token ids (the template writes the special tokens itself)."""
        return list(self.tokenizer(self.render_prompt(messages, tools), add_special_tokens=False)["input_ids"])

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def _sample(self, ids: list[int], logprobs: list[float], prompt: list[int], params: SamplingParams,
                extra: dict[str, Any] | None = None) -> Sample:
        """Generated `ids` as a `Sample`: cut after the first end-of-turn token, then at the first stop string
        (`params.stop`), the log-probs cut with them; `finish_reason` 'stop' when either cut, else 'length'."""
        ends = set(self.end_ids)
        stop_at = next((k for k, t in enumerate(ids) if t in ends), None)
        finish: FinishReason = "stop" if stop_at is not None else "length"
        if stop_at is not None:
            ids = ids[: stop_at + 1]
        text = self._decode(ids)
        if params.stop:
            text, hit = cut_at_stop(text, params.stop)
            if hit is not None:
                ids = ids[: self._tokens_for(ids, hit)]
                finish = "stop"
        return Sample(text=text, token_ids=tuple(ids), logprobs=tuple(logprobs[: len(ids)]),
                      prompt_token_ids=tuple(prompt), finish_reason=finish, extra=extra or {})

    def _tokens_for(self, ids: list[int], stop: str) -> int:
        """The fewest leading tokens whose text contains `stop` (binary search; containment grows with the prefix)."""
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if stop in self._decode(ids[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return hi
