"""What every scripted policy shares: the policy's shape and reading and writing the conversation's messages.

A scripted policy is a function from the conversation so far (and the tool
schemas) to the next assistant message, which holds a `<tool_call>`. It sees
only what a model would see: never a gold answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

from librarian.models.base import Message, ToolSchema
from librarian.models.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN


class ScriptedPolicy(Protocol):
    """The next assistant message for a conversation."""

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None) -> str: ...


def tool_call_text(name: str, **arguments: Any) -> str:
    """An assistant message holding one call in the Hermes format."""
    return f"{TOOL_CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}{TOOL_CALL_CLOSE}"


def observation_text(message: Message) -> str:
    """A tool result's text, whether sent as a `tool` turn or as a user turn in `<tool_response>` tags."""
    content = message["content"]
    match = re.fullmatch(r"\s*<tool_response>\n?(.*?)\n?</tool_response>\s*", content, re.S)
    return match.group(1) if match else content


def task_question(messages: Sequence[Message]) -> str:
    """The question of the task: the text after 'Question:' in the first user turn, else that whole turn."""
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    match = re.search(r"Question:\s*(.+)", first)
    return (match.group(1) if match else first).strip()


def last_observation(messages: Sequence[Message]) -> str | None:
    """The latest tool result, or None before the first action."""
    if not any(m["role"] == "assistant" for m in messages):
        return None
    last = messages[-1]
    if last["role"] == "tool" or (last["role"] == "user" and "<tool_response>" in last["content"]):
        return observation_text(last)
    return None
