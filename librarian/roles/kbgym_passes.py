"""The task texts of a KBGym training iteration (paper 001 §V): forward pass, then backward pass.

The backward pass is told the same thing whatever happened: its own forward
trajectory, the gold answer, its F1, one of three coarse outcomes, then one
uniform instruction (no oracle localisation, no branching on the failure).
"""

from __future__ import annotations

import json

from librarian.roles.trajectory import Trajectory

OUTCOMES = ("budget exhausted", "answered wrongly", "answered correctly")
UNIFORM_INSTRUCTION = (
    "Name the keys this question mentioned (the people, places, jobs, hobbies and relations it named) and make "
    "sure each has a complete index document: build what is missing, extend what is partial, change nothing if "
    "they are already complete."
)
OBSERVATION_CHARS = 300


def forward_task(question: str) -> str:
    """The reader's task message (identical in the forward pass and at exam time)."""
    return f"Question: {question}"


def outcome(trajectory: Trajectory, f1: float) -> str:
    """One of `OUTCOMES`: no answer within the budget, an answer below F1 1, or a correct one."""
    if trajectory.answer is None:
        return OUTCOMES[0]
    return OUTCOMES[2] if f1 >= 1.0 else OUTCOMES[1]


def _step_lines(trajectory: Trajectory) -> list[str]:
    lines = []
    for turn in trajectory.turns:
        calls = "; ".join(f"{c['name']}({json.dumps(c['arguments'], ensure_ascii=False)})" for c in turn.calls) \
            or "(no valid call)"
        seen = " ".join(turn.observation.split())
        if len(seen) > OBSERVATION_CHARS:
            seen = seen[: OBSERVATION_CHARS - 3] + "..."
        lines.append(f"{turn.index + 1}. {calls} -> {seen}")
    return lines


def backward_task(question: str, trajectory: Trajectory, gold: list[str], f1: float) -> str:
    """The curator's task message for one question: trajectory, gold, F1, outcome, uniform instruction."""
    answer = trajectory.answer if trajectory.answer is not None else "(none: the budget ran out)"
    parts = [
        forward_task(question),
        "",
        f"Your forward pass ({trajectory.actions} of {trajectory.budget} actions):",
        *_step_lines(trajectory),
        "",
        f"Your answer: {answer}",
        f"Gold answer: {', '.join(gold)}",
        f"F1: {f1:.2f}",
        f"Outcome: {outcome(trajectory, f1)}",
        "",
        UNIFORM_INSTRUCTION,
    ]
    return "\n".join(parts)


def curation_task(question: str) -> str:
    """A backward-pass task without a forward pass (offline curation from questions alone, as in the demo)."""
    return f"{forward_task(question)}\n\n{UNIFORM_INSTRUCTION}"
