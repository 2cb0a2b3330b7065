"""The `scripted` backend: scripted policies by name (`SCRIPTED_POLICIES`) and `ScriptedBackend`, which makes any
scripted policy a `PolicyBackend` (samples carry text, no tokens).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

from librarian.models.base import Message, Sample, SamplingParams, ToolSchema, check_conversations
from librarian.models.chat import chatml
from librarian.models.scripted.base import ScriptedPolicy, last_observation, task_question, tool_call_text

_HIT_ID = re.compile(r"^\s*1\.\s+id=(\S+)", re.M)


def first_hit_reader(messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
    """A trivial KBGym reader: search the question, read the first hit, answer with its first line.

    Stateless: it decides from the last observation alone, so it works with
    any memory window. The loop's test driver, not a real planner.
    """
    seen = last_observation(messages)
    if seen is None:
        return tool_call_text("search", query=task_question(messages), page=1)
    if seen.startswith("search "):
        hit = _HIT_ID.search(seen)
        return tool_call_text("read", id=hit.group(1)) if hit else tool_call_text("answer", text="unknown")
    if seen.startswith("["):  # a read: header, optional links/provenance, '---', then the text
        body = seen.split("\n---\n", 1)[1] if "\n---\n" in seen else ""
        first = next((line.strip() for line in body.splitlines() if line.strip()), "unknown")
        return tool_call_text("answer", text=first)
    return tool_call_text("answer", text="unknown")


# name -> a policy, or "module:attr" of a policy or of a class whose instances are policies (imported when used)
SCRIPTED_POLICIES: dict[str, Callable[..., str] | str] = {
    "kbgym_first_hit": first_hit_reader,
    "kbgym_reader": "librarian.models.scripted.reader:KBGymReader",
    "reactive_reader": "librarian.models.scripted.reactive:ReactiveReader",
    "kbgym_curator": "librarian.models.scripted.curator:KBGymCurator",
    "phantom_reader": "librarian.models.scripted.phantom_reader:PhantomReader",
    "phantom_curator": "librarian.models.scripted.phantom_curator:PhantomCurator",
    "librarian_builder": "librarian.models.scripted.builder:HeuristicBuilder",
    "librarian_builder_compact": "librarian.models.scripted.builder:CompactHeuristicBuilder",
    "librarian_builder_index": "librarian.models.scripted.builder:SingleIndexBuilder",
    "jam_researcher": "librarian.models.scripted.researcher:ScriptedResearcher",
}


def scripted_policy(name: str, **settings: Any) -> ScriptedPolicy:
    """The scripted policy registered as `name` (a fresh instance for class entries, built with `settings`,
    e.g. the KBGym reader's `trust` and `depth`); raises ValueError naming a setting the policy does not take."""
    if name not in SCRIPTED_POLICIES:
        raise ValueError(f"unknown scripted policy {name!r}; known: {', '.join(sorted(SCRIPTED_POLICIES))}")
    entry = SCRIPTED_POLICIES[name]
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
        if isinstance(entry, type):
            params = inspect.signature(entry).parameters
            unknown = sorted(k for k in settings if k not in params)
            if unknown:
                takes = ", ".join(p for p in params if p != "self") or "no settings"
                raise ValueError(f"scripted policy {name!r} has no setting {', '.join(unknown)} (it takes {takes})")
            return entry(**settings)  # type: ignore[no-any-return]
    if settings:
        raise ValueError(f"scripted policy {name!r} takes no settings, got {', '.join(sorted(settings))}")
    return entry  # type: ignore[return-value]


class ScriptedBackend:
    """`PolicyBackend` over a scripted policy; every one of the n samples is the same message."""

    def __init__(self, policy: ScriptedPolicy, name: str | None = None) -> None:
        if not callable(policy):
            raise TypeError(f"a scripted policy must be callable, got {type(policy).__name__}")
        self.policy = policy
        self.name = name or f"scripted:{getattr(policy, '__name__', type(policy).__name__)}"

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        return chatml(check_conversations([messages])[0], tools)

    def generate(self, conversations: Sequence[Sequence[Message]], tools: Sequence[ToolSchema] | None,
                 params: SamplingParams) -> list[list[Sample]]:
        out = []
        for conv in check_conversations(conversations):
            text = self.policy(conv, tools)
            if not isinstance(text, str):
                raise TypeError(f"{self.name} returned {type(text).__name__}, expected the message text")
            out.append([Sample(text=text)] * params.n)
        return out


def make_scripted_backend(policy: str | ScriptedPolicy = "kbgym_first_hit", **settings: Any) -> ScriptedBackend:
    """Registry entry: a scripted policy by name (see `SCRIPTED_POLICIES`; `settings` go to its class) or a
    callable."""
    if isinstance(policy, str):
        return ScriptedBackend(scripted_policy(policy, **settings), name=f"scripted:{policy}")
    if settings:
        raise ValueError(f"a scripted policy given as a callable takes no settings, got {', '.join(sorted(settings))}")
    return ScriptedBackend(policy)
