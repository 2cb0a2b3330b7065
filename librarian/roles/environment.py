"""The environment contract the episode loop runs against, and `ToolEnv`, which binds a role's tools to a workspace.

Gymnasium-style, in a few lines: `reset()` gives the opening messages and
the tool schemas; `step(text, actions_left)` takes the policy's message,
runs the calls in it and returns the observation and its cost;
`final_answer(text)` reads a forced answer. The loop knows nothing else about a role.

Rewards are not returned by `step`: they are computed after the episode, on
the driver, from what the episode left. That is the trajectory (its answer,
its turns) and the environment's `outcome()`: None for an environment whose
reward is read from the trajectory alone (a reader's answer, a researcher's
finalized context), the workspace snapshots of a build
(`probing_env.ProbingEnv.outcome`, which the answerer probe turns into
per-turn rewards).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from librarian.models.base import Message, ToolSchema
from librarian.roles.definitions import Role
from librarian.roles.tool_calls import CallError, ToolCall, ToolCallParser
from librarian.roles.toolbox import get_tools, schemas
from librarian.roles.tools import ToolContext, ToolResult, run_tool


@dataclass(frozen=True, slots=True)
class Reset:
    """The opening of an episode: system and task messages, and the tools offered."""

    messages: list[Message]
    tools: list[ToolSchema]


@dataclass(frozen=True, slots=True)
class Step:
    """What one policy message did."""

    observation: str
    actions: int
    results: tuple[ToolResult, ...] = ()
    calls: tuple[ToolCall, ...] = ()
    errors: tuple[CallError, ...] = ()
    terminated: bool = False
    answer: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Environment(Protocol):
    """What the episode loop needs from an environment."""

    def reset(self) -> Reset: ...

    def step(self, text: str, actions_left: int) -> Step: ...

    def final_answer(self, text: str) -> Step: ...

    def answer_tools(self) -> list[ToolSchema]: ...

    def outcome(self) -> Any:
        """What the finished episode leaves for its reward besides the trajectory (None: nothing)."""
        ...


_TAGS = re.compile(r"</?tool_call>")


class ToolEnv:
    """A role's tools over a `ToolContext`, for one task (a question, a curation pass, a build)."""

    def __init__(self, role: Role, context: ToolContext, task: str) -> None:
        self.role = role
        self.context = context
        self.task = task
        self.tools = get_tools(role.tools)
        self.parser = ToolCallParser(schemas(self.tools), role.max_calls_per_turn)
        answer = {n: t for n, t in self.tools.items() if n == role.answer_tool}
        self._answer_parser = ToolCallParser(schemas(answer)) if answer else None
        self._answer_schemas = schemas(answer)

    def reset(self) -> Reset:
        return Reset([{"role": "system", "content": self.role.system_prompt},
                      {"role": "user", "content": self.task}], schemas(self.tools))

    def answer_tools(self) -> list[ToolSchema]:
        return list(self._answer_schemas)

    def outcome(self) -> None:
        """Nothing beyond the trajectory: a tool episode's reward is read from its answer."""
        return None

    def step(self, text: str, actions_left: int) -> Step:
        parsed = self.parser.parse(text)
        parts: list[str] = []
        results: list[ToolResult] = []
        actions = 0
        answer: str | None = None
        terminated = False
        skipped = 0
        multi = len(parsed.items) > 1
        for i, item in enumerate(parsed.items, start=1):
            label = f"[{i}] " if multi else ""
            if terminated or actions >= actions_left:
                skipped += 1
                continue
            if isinstance(item, CallError):
                actions += 1
                parts.append(label + item.observation())
                continue
            result = run_tool(self.tools[item.name], self.context, item.arguments)
            actions += result.actions
            results.append(result)
            parts.append(label + result.text)
            if result.terminal and result.ok:
                terminated, answer = True, result.answer
        if skipped:
            why = "the episode ended" if terminated else "the action budget ran out"
            parts.append(f"({skipped} more call(s) not run: {why})")
        return Step("\n\n".join(parts), actions, tuple(results), parsed.calls, parsed.errors, terminated, answer)

    def final_answer(self, text: str) -> Step:
        """Read a forced answer: an answer call if there is one, else the message's plain text."""
        if self._answer_parser is not None:
            parsed = self._answer_parser.parse(text)
            if parsed.calls:
                result = run_tool(self.tools[self.role.answer_tool], self.context, parsed.calls[0].arguments)
                return Step(result.text, 0, (result,), parsed.calls, (), True, result.answer, {"forced": True})
        plain = _TAGS.sub("", text).strip()
        return Step("answer taken from the message text", 0, (), (), (), True, plain, {"forced": True})
