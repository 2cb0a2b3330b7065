"""Hint-guided GRPO for the builder: a hint every K_h turns of a *training* rollout, never at evaluation.

A hint is conditioned on the trajectory (which sources the builder has
already consolidated) and on the reference answers (the hidden training
questions, their gold answers and the documents that support them): it names
the next question whose evidence is not yet consolidated and the documents to
consolidate. It reaches the builder appended to a tool observation, so it is
prompt (masked out of the loss), not something the policy is trained to say.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HintReference:
    """One hidden training question: its text, gold answers and the paths of its supporting documents."""

    question: str
    answers: tuple[str, ...]
    support: tuple[str, ...]


def builder_hint(references: Sequence[HintReference], consolidated: Iterable[str], turn: int) -> str | None:
    """The hint after builder turn `turn` (1-based): the first reference whose support is not yet all consolidated.

    References are taken in turn order starting at `turn`, so successive hints
    cover different questions; None when everything is consolidated.
    """
    done = set(consolidated)
    if not references:
        return None
    n = len(references)
    for k in range(n):
        ref = references[(turn + k) % n]
        missing = [p for p in ref.support if p not in done]
        if missing:
            answers = ", ".join(ref.answers)
            paths = ", ".join(missing)
            return (f"Hint: readers will ask \"{ref.question}\" (answer: {answers}). The evidence is in {paths}; "
                    "consolidate it with create_file so a reader finds it in one read.")
    return None


def consolidated_sources(calls: Iterable[dict]) -> set[str]:
    """Sources named by the builder's create_file calls so far (from a trajectory's recorded calls)."""
    out: set[str] = set()
    for call in calls:
        if call.get("name") == "create_file":
            out.update(str(s) for s in call.get("arguments", {}).get("sources", []) or [])
    return out
