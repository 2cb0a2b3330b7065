"""What the reader spent per query: tokens and files read, actions (paper 000 Tables 2, 4-5)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueryCost:
    """One episode's reading cost."""

    tokens: float
    files: int
    synthetic_files: int = 0
    raw_files: int = 0
    actions: int = 0


def query_cost_from_summary(summary: Mapping[str, object]) -> QueryCost:
    """A `QueryCost` from an episode summary (`Trajectory.summary()`: est_tokens_read, raw_touched,
    synthetic_touched, actions)."""
    missing = [k for k in ("est_tokens_read", "raw_touched", "synthetic_touched", "actions") if k not in summary]
    if missing:
        raise ValueError(f"episode summary lacks {missing}; expected Trajectory.summary() fields")
    raw, syn = int(summary["raw_touched"]), int(summary["synthetic_touched"])  # type: ignore[call-overload]
    return QueryCost(float(summary["est_tokens_read"]), raw + syn, syn, raw,  # type: ignore[arg-type]
                     int(summary["actions"]))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class ReadingStats:
    """Means over queries, and the standard error of the token mean."""

    n: int
    tokens: float
    tokens_se: float
    files: float
    synthetic_files: float
    raw_files: float
    actions: float


def reading_stats(costs: Sequence[QueryCost]) -> ReadingStats:
    """Mean tokens, files (synthetic, raw) and actions per query."""
    if not costs:
        raise ValueError("reading_stats needs at least one query")
    if any(c.tokens < 0 or c.files < 0 or c.actions < 0 for c in costs):
        raise ValueError("reading costs must be >= 0")
    toks = [c.tokens for c in costs]
    se = statistics.stdev(toks) / len(toks) ** 0.5 if len(toks) > 1 else 0.0
    mean = statistics.fmean
    return ReadingStats(len(costs), mean(toks), se, mean(c.files for c in costs),
                        mean(c.synthetic_files for c in costs), mean(c.raw_files for c in costs),
                        mean(c.actions for c in costs))
