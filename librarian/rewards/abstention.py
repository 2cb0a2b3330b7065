"""Abstention: recognising "I cannot answer" and scoring it against answerability.

KBGym's abstention class (QC5) has the gold `unknown`; LoCoMo's adversarial
category expects "no information available" or "not mentioned". An
abstention is correct exactly when the question is unanswerable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from librarian.datasets.kbgym.templates import ABSTAIN
from librarian.datasets.scoring import LOCOMO_ABSTAIN_PHRASES, squad_normalize

ABSTAIN_PATTERNS: tuple[str, ...] = (
    rf"^{ABSTAIN}$",
    r"^(i )?(do not|dont|don't) know$",
    r"\bno (information|answer|record|data)( is)? (available|found|given)\b",
    r"\bnot (mentioned|known|stated|recorded|available)\b",
    r"\b(cannot|can not|cant|unable to) (be )?(determined?|answer(ed)?|find|found|know)\b",
    r"\binsufficient (information|evidence)\b",
    r"^(none|n a|no answer|unanswerable)$",
)
_COMPILED = tuple(re.compile(p) for p in ABSTAIN_PATTERNS)


def abstains(prediction: str | None) -> bool:
    """True when the prediction declines to answer (no answer at all counts as abstaining)."""
    if prediction is None:
        return True
    low = prediction.lower()
    if any(p in low for p in LOCOMO_ABSTAIN_PHRASES):
        return True
    norm = squad_normalize(prediction.replace("'", ""))
    return not norm or any(p.search(norm) for p in _COMPILED)


def abstention_score(prediction: str | None, answerable: bool) -> float:
    """1.0 when the prediction abstains exactly when the question is unanswerable, else 0.0."""
    return float(abstains(prediction) != answerable)


@dataclass(frozen=True, slots=True)
class AbstentionStats:
    """How well a reader abstains: precision/recall/F1 of abstaining, and its overall rate."""

    precision: float
    recall: float
    f1: float
    rate: float
    n: int


def abstention_stats(predictions: Sequence[str | None], answerable: Sequence[bool]) -> AbstentionStats:
    """Abstention precision (abstained where unanswerable), recall (over unanswerable questions) and rate.

    Precision is 1.0 when the reader never abstains and recall is 1.0 when
    every question is answerable (nothing to miss).
    """
    if len(predictions) != len(answerable):
        raise ValueError(f"predictions ({len(predictions)}) and answerable ({len(answerable)}) differ in length")
    if not predictions:
        raise ValueError("abstention_stats needs at least one prediction")
    said = [abstains(p) for p in predictions]
    hit = sum(1 for s, a in zip(said, answerable, strict=True) if s and not a)
    n_said, n_unans = sum(said), sum(1 for a in answerable if not a)
    p = hit / n_said if n_said else 1.0
    r = hit / n_unans if n_unans else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return AbstentionStats(p, r, f, n_said / len(said), len(said))
