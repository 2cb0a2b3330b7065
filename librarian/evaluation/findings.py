"""Sentences a report opens with, computed from its figures: intervals and paired differences in words.

A difference is called a difference only when its 95% CI excludes 0;
otherwise the sentence says "no difference shown". Nothing here knows a
pipeline: `builder_findings` and the JAM arms' `arm_findings` build on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def interval(ci: Sequence[float], signed: bool = True) -> str:
    """A 95% CI as text: '[-0.012, +0.034]' (a difference), or '[0.955, 1.000]' with `signed=False` (a level)."""
    low, high = ci
    return f"[{low:+.3f}, {high:+.3f}]" if signed else f"[{low:.3f}, {high:.3f}]"


def excludes_zero(ci: Sequence[float]) -> bool:
    """Whether the interval lies wholly above or wholly below 0."""
    return ci[0] > 0 or ci[1] < 0


def difference(what: str, a: str, b: str, point: float, ci: Sequence[float], higher: str = "higher",
               lower: str = "lower") -> str:
    """'<what>, a - b: +0.050 (95% CI [+0.010, +0.090]): a is higher than b.' or '...: no difference shown ...';
    `higher` and `lower` name the two directions (e.g. 'slower', 'faster' for a latency)."""
    head = f"{what}, {a} - {b}: {point:+.3f} (95% CI {interval(ci)})"
    if ci[0] > 0:
        return f"{head}: {a} is {higher} than {b}."
    if ci[1] < 0:
        return f"{head}: {a} is {lower} than {b}."
    return f"{head}: no difference shown (the interval contains 0)."


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 step', '3 steps'."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def no_signal_steps(history: Sequence[Mapping[str, Any]]) -> list[int]:
    """RL steps where no group's samples differed in reward (every advantage 0: the loss is 0 by construction)."""
    return [int(h["step"]) for h in history if h.get("nonzero_advantage_fraction", 1.0) == 0]
