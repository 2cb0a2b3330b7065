"""Amortization (paper 000 §A.4): tokens per query T_m(q) = B_m / q + A_m, per expected correct
answer T_m(q) / p_m, and the query volume at which two methods cross.

B_m is the construction cost per corpus, A_m the answer-time cost per
question, p_m the full-denominator accuracy, q the questions served per corpus.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _nonneg(name: str, v: float) -> float:
    if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0 (got {v!r})")
    return float(v)


@dataclass(frozen=True, slots=True)
class AmortizationCurve:
    """One method's costs: `build` (B) per corpus, `answer` (A) per question, `accuracy` (p) in (0, 1]."""

    name: str
    build: float
    answer: float
    accuracy: float = 1.0

    def __post_init__(self) -> None:
        _nonneg(f"{self.name}: build", self.build)
        _nonneg(f"{self.name}: answer", self.answer)
        if not isinstance(self.accuracy, int | float) or not 0.0 < self.accuracy <= 1.0:
            raise ValueError(f"{self.name}: accuracy must be in (0, 1] (got {self.accuracy!r}); "
                             "a method that is never right has no cost per correct answer")

    def tokens_per_query(self, q: float | np.ndarray) -> float | np.ndarray:
        """T(q) = B / q + A."""
        return self.build / _check_q(q) + self.answer

    def tokens_per_correct(self, q: float | np.ndarray) -> float | np.ndarray:
        """T(q) / p: recorded tokens per expected correct answer."""
        return self.tokens_per_query(q) / self.accuracy

    @classmethod
    def from_logs(cls, name: str, build_per_corpus: Sequence[float], answer_per_question: Sequence[float],
                  correct_per_question: Sequence[float] | None = None) -> AmortizationCurve:
        """B, A and p as means of logged construction costs, answer costs and correctness."""
        if not build_per_corpus or not answer_per_question:
            raise ValueError(f"{name}: from_logs needs at least one corpus and one question")
        p = 1.0
        if correct_per_question is not None:
            if len(correct_per_question) != len(answer_per_question):
                raise ValueError(f"{name}: {len(correct_per_question)} correctness values for "
                                 f"{len(answer_per_question)} questions")
            p = float(np.mean(correct_per_question))
        return cls(name, float(np.mean(build_per_corpus)), float(np.mean(answer_per_question)), p)


def _check_q(q: float | np.ndarray) -> float | np.ndarray:
    arr = np.asarray(q, dtype=float)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"questions per corpus q must be > 0 (got {q!r})")
    return q


def crossover(a: AmortizationCurve, b: AmortizationCurve, normalized: bool = False) -> float | None:
    """The q > 0 at which a and b cost the same per query (or per expected correct answer).

    Solves B_a/q + A_a = B_b/q + A_b (each side divided by its accuracy when
    `normalized`): q* = (B_a - B_b) / (A_b - A_a). Returns None when the
    curves never cross at a positive q (one is cheaper at every volume, or
    they coincide). Beyond q* the method with the smaller A is cheaper.
    """
    pa, pb = (a.accuracy, b.accuracy) if normalized else (1.0, 1.0)
    d_build = a.build / pa - b.build / pb
    d_answer = b.answer / pb - a.answer / pa
    if d_answer == 0 or d_build == 0:
        return None
    q = d_build / d_answer
    return q if q > 0 and math.isfinite(q) else None


def cheaper_from(a: AmortizationCurve, b: AmortizationCurve, normalized: bool = False) -> int | None:
    """The smallest whole number of questions per corpus from which `a` is strictly cheaper than `b`
    for every larger volume; None when that never happens (1 when it holds from the start)."""
    pa, pb = (a.accuracy, b.accuracy) if normalized else (1.0, 1.0)
    a_build, a_ans, b_build, b_ans = a.build / pa, a.answer / pa, b.build / pb, b.answer / pb
    if a_ans > b_ans or (a_ans == b_ans and a_build >= b_build):
        return None  # for large q, a is not cheaper
    if a_build < b_build:
        return 1
    q = crossover(a, b, normalized)
    if q is None:
        return None
    n = math.floor(q) + 1  # strictly past the crossing
    return max(n, 1)
