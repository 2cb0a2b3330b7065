"""Answer scoring: one dispatcher over the official scorers of `librarian.datasets.scoring`.

A question's `metric` decides how a prediction is graded (docs/datasets.md):
`set_f1` / `pw_set_f1` golds are the complete set, `squad_f1` / `locomo_f1` /
`judge` golds are acceptable alternatives. `score_answer` returns the headline
score in [0, 1]; `answer_scores` adds exact match and, for set metrics,
precision and recall.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from librarian.datasets import scoring as official
from librarian.datasets.records import METRICS, Question

# (question, gold answers, prediction) -> verdict; an `LLMJudge` is one
JudgeFn = Callable[[str, Sequence[str], str], "bool | None"]


class ScoringError(ValueError):
    """A prediction could not be scored; the message names what was missing or wrong."""


@dataclass(frozen=True, slots=True)
class AnswerScore:
    """Headline score plus exact match, precision and recall where the metric defines them."""

    score: float
    em: float
    precision: float
    recall: float


def _resolve(question: Question | str, answers: Sequence[str] | None, category: int | None
             ) -> tuple[str, list[str], int | None, str]:
    if isinstance(question, Question):
        golds = list(question.answers) if answers is None else list(answers)
        cat = category
        if cat is None and question.metric == "locomo_f1":
            raw = question.extra.get("category")
            if raw is None:
                raise ScoringError(f"question {question.id}: metric locomo_f1 needs extra['category']")
            cat = int(raw)
        return question.metric, golds, cat, question.question
    if isinstance(question, str):
        if question not in METRICS:
            raise ScoringError(f"unknown metric {question!r}; expected one of {METRICS}")
        if answers is None:
            raise ScoringError(f"metric {question!r} given by name needs the gold `answers`")
        return question, list(answers), category, ""
    raise ScoringError(f"score_answer needs a Question or a metric name, got {type(question).__name__}")


def _check_prediction(prediction: object) -> str:
    if prediction is None:
        return ""  # no answer (budget exhausted): scores 0 against any non-empty gold
    if not isinstance(prediction, str):
        raise ScoringError(f"prediction must be a string or None, got {type(prediction).__name__}")
    return prediction


def answer_scores(question: Question | str, prediction: str | None, answers: Sequence[str] | None = None, *,
                  category: int | None = None, judge: JudgeFn | None = None) -> AnswerScore:
    """Score, exact match, precision and recall of `prediction` under the question's metric.

    `question` is a `Question` (its metric, answers and LoCoMo category are
    used) or a metric name with `answers` given. `judge` is required for the
    `judge` metric; an unparsed verdict counts as wrong (failure-inclusive).
    A `None` prediction (no answer) is scored as the empty string.
    """
    metric, golds, cat, qtext = _resolve(question, answers, category)
    pred = _check_prediction(prediction)
    if metric in ("set_f1", "pw_set_f1"):
        prf = official.set_f1(pred, golds) if metric == "set_f1" else official.pw_set_f1(pred, golds)
        return AnswerScore(prf.f1, float(prf.precision == 1.0 and prf.recall == 1.0), prf.precision, prf.recall)
    if metric == "squad_f1":
        if not golds:
            raise ScoringError("metric squad_f1 needs at least one gold answer")
        best = max((official.hotpot_answer(pred, g) for g in golds), key=lambda m: (m.f1, m.em))
        em = official.squad_em(pred, golds)
        return AnswerScore(official.squad_f1(pred, golds), em, best.precision, best.recall)
    if metric == "locomo_f1":
        if cat is None or not golds:
            raise ScoringError("metric locomo_f1 needs the question's category and one gold answer")
        s = official.locomo_score(pred, golds[0], cat)
        em = float(official.locomo_normalize(pred) == official.locomo_normalize(golds[0]))
        return AnswerScore(s, em, s, s)
    if metric == "judge":
        if judge is None:
            raise ScoringError("metric 'judge' needs a judge (an LLMJudge or a (question, golds, response) callable)")
        s = float(bool(judge(qtext, golds, pred)))
        return AnswerScore(s, s, s, s)
    raise ScoringError(f"unknown metric {metric!r}; expected one of {METRICS}")


def score_answer(question: Question | str, prediction: str | None, answers: Sequence[str] | None = None, *,
                 category: int | None = None, judge: JudgeFn | None = None) -> float:
    """The headline score in [0, 1] of `prediction` (see `answer_scores`)."""
    return answer_scores(question, prediction, answers, category=category, judge=judge).score


def hotpot_em_f1(prediction: str, gold: str) -> tuple[float, float]:
    """HotpotQA answer EM and F1 (yes/no/noanswer must match exactly)."""
    m = official.hotpot_answer(prediction, gold)
    return m.em, m.f1
