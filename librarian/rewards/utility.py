"""Paper 000's utility and construction rewards (Eq. 1-4), as pure functions.

- Utility (Eq. 1): U(F) = S(F) - lambda_tok C_tok(F) - lambda_read C_read(F),
  an expectation over questions and answering rollouts in which each
  rollout's costs are multiplied by its correctness, so a wrong answer has
  utility 0 whatever it cost.
- Sparse reward (Eq. 2): U(F_H) - alpha * sum_t Cost_build(A_t).
- Dense reward (Eq. 3): r_t = U(F_t) - U(F_{t-1}) - alpha Cost_build(A_t); with
  a discount gamma < 1 the shaped form r_t = gamma Phi(F_t) - Phi(F_{t-1}) -
  alpha Cost_build(A_t) with potential Phi = U.
- Telescoping (Eq. 4): sum_t gamma^(t-1) r_t = gamma^T U(F_T) - U(F_0) - alpha
  sum_t gamma^(t-1) Cost_build(A_t); at gamma = 1 that is r_sparse - U(F_0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


class RewardError(ValueError):
    """Bad input to a reward function; the message names the argument."""


@dataclass(frozen=True, slots=True)
class RolloutOutcome:
    """One answering rollout on one question.

    `correct` is Acc in [0, 1] (binary in the paper; a graded F1 also works);
    `tokens` and `reads` are its raw navigation costs (synthetic-memory tokens
    read, files read), normalised by `UtilityWeights` scales.
    """

    question: str
    correct: float
    tokens: float = 0.0
    reads: float = 0.0


@dataclass(frozen=True, slots=True)
class UtilityWeights:
    """lambda_tok, lambda_read and the scales that normalise raw costs (C = raw / scale)."""

    lambda_tok: float = 0.0
    lambda_read: float = 0.0
    tok_scale: float = 1.0
    read_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("lambda_tok", "lambda_read"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise RewardError(f"{name} must be a finite number >= 0 (got {v})")
        for name in ("tok_scale", "read_scale"):
            v = getattr(self, name)
            if not math.isfinite(v) or v <= 0:
                raise RewardError(f"{name} must be a finite number > 0 (got {v})")


@dataclass(frozen=True, slots=True)
class Utility:
    """U and its parts: S (expected correctness) and the correctness-weighted normalised costs."""

    utility: float
    success: float
    tok_cost: float
    read_cost: float
    questions: int
    rollouts: int


def _finite(name: str, v: float) -> float:
    if not isinstance(v, int | float) or not math.isfinite(v):
        raise RewardError(f"{name} must be a finite number (got {v!r})")
    return float(v)


def utility(outcomes: Sequence[RolloutOutcome], weights: UtilityWeights | None = None) -> Utility:
    """U(F) (Eq. 1): mean over questions of the mean over each question's rollouts.

    Each rollout contributes Acc, Acc * tokens / tok_scale and Acc * reads /
    read_scale; U = S - lambda_tok C_tok - lambda_read C_read.
    """
    w = weights or UtilityWeights()
    if not outcomes:
        raise RewardError("utility needs at least one rollout outcome")
    groups: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for o in outcomes:
        acc = _finite("correct", o.correct)
        if not 0.0 <= acc <= 1.0:
            raise RewardError(f"correct must be in [0, 1] (got {acc} for question {o.question!r})")
        tok, rd = _finite("tokens", o.tokens), _finite("reads", o.reads)
        if tok < 0 or rd < 0:
            raise RewardError(f"costs must be >= 0 (question {o.question!r}: tokens {tok}, reads {rd})")
        groups[o.question].append((acc, acc * tok / w.tok_scale, acc * rd / w.read_scale))
    per_q = [tuple(sum(col) / len(rows) for col in zip(*rows, strict=True)) for rows in groups.values()]
    s, ct, cr = (sum(col) / len(per_q) for col in zip(*per_q, strict=True))
    return Utility(s - w.lambda_tok * ct - w.lambda_read * cr, s, ct, cr, len(per_q), len(outcomes))


def _check_gamma(gamma: float) -> float:
    if not isinstance(gamma, int | float) or not 0.0 < gamma <= 1.0:
        raise RewardError(f"gamma must be in (0, 1] (got {gamma!r})")
    return float(gamma)


def _check_costs(build_costs: Sequence[float], alpha: float) -> list[float]:
    if not math.isfinite(alpha) or alpha < 0:
        raise RewardError(f"alpha must be a finite number >= 0 (got {alpha})")
    out = [_finite("build cost", c) for c in build_costs]
    if any(c < 0 for c in out):
        raise RewardError(f"build costs must be >= 0 (got {out})")
    return out


def sparse_reward(final_utility: float, build_costs: Sequence[float], alpha: float = 0.0) -> float:
    """r_sparse (Eq. 2) = U(F_H) - alpha * sum of the per-action construction costs."""
    costs = _check_costs(build_costs, alpha)
    return _finite("final_utility", final_utility) - alpha * sum(costs)


def dense_rewards(utilities: Sequence[float], build_costs: Sequence[float] | None = None, alpha: float = 0.0,
                  gamma: float = 1.0) -> list[float]:
    """Per-turn rewards r_1..r_T (Eq. 3, shaped with gamma) from U(F_0..F_T) and Cost_build(A_1..A_T).

    `utilities` has T + 1 entries (the initial workspace first); `build_costs`
    has T (default zeros). r_t = gamma U(F_t) - U(F_{t-1}) - alpha Cost(A_t).
    """
    g = _check_gamma(gamma)
    u = [_finite("utility", x) for x in utilities]
    if len(u) < 1:
        raise RewardError("dense_rewards needs U(F_0) at least")
    costs = _check_costs(build_costs if build_costs is not None else [0.0] * (len(u) - 1), alpha)
    if len(costs) != len(u) - 1:
        raise RewardError(f"{len(u)} utilities (U(F_0)..U(F_T)) need {len(u) - 1} build costs, got {len(costs)}")
    return [g * u[t] - u[t - 1] - alpha * costs[t - 1] for t in range(1, len(u))]


def discounted_return(rewards: Sequence[float], gamma: float = 1.0) -> float:
    """sum_t gamma^(t-1) r_t over r_1..r_T."""
    g = _check_gamma(gamma)
    return sum(g ** i * _finite("reward", r) for i, r in enumerate(rewards))


def returns_to_go(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """G_t = sum_{k >= t} gamma^(k-t) r_k for every turn (the per-turn returns GRPO normalises)."""
    g = _check_gamma(gamma)
    out: list[float] = []
    acc = 0.0
    for r in reversed(rewards):
        acc = _finite("reward", r) + g * acc
        out.append(acc)
    return out[::-1]
