"""Official scorers as pure functions (the rewards layer reuses them).

- SQuAD: answer normalisation, token F1 and exact match, best over alternatives
  (NarrativeQA, HotpotQA answers; KBGym set elements).
- Set-based precision/recall/F1 for list answers: KBGym (`set_f1`, elements
  SQuAD-normalised) and PhantomWiki (`pw_set_f1`, elements stripped and
  lower-cased, as its evaluation does).
- LoCoMo: its own normalisation (commas dropped, "and" removed with the
  articles) and Porter-stemmed token F1, with the per-category conventions.
- HotpotQA: answer EM/F1 with the yes/no/noanswer rule, supporting-fact
  EM/precision/recall/F1 over (title, sentence id) pairs, and joint metrics.
- LLM judge: a grading prompt and the parser for its verdict (BrowseComp-Plus,
  BRIGHT generation, LongMemEval).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_PUNCT = set(string.punctuation)


# ---- SQuAD ---------------------------------------------------------------------------------


def squad_normalize(text: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _f1_tokens(pred: Sequence[str], gold: Sequence[str]) -> tuple[float, float, float]:
    common = Counter(pred) & Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0, 0.0, 0.0
    p = same / len(pred)
    r = same / len(gold)
    return p, r, 2 * p * r / (p + r)


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 between one prediction and one gold answer.

    Two answers that normalise to nothing count as a match (1.0).
    """
    pt, gt = squad_normalize(prediction).split(), squad_normalize(gold).split()
    if not pt and not gt:
        return 1.0
    return _f1_tokens(pt, gt)[2]


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the SQuAD-normalised strings are equal."""
    return float(squad_normalize(prediction) == squad_normalize(gold))


def squad_f1(prediction: str, golds: Iterable[str]) -> float:
    """Best token F1 over alternative gold answers (0.0 when there are none)."""
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def squad_em(prediction: str, golds: Iterable[str]) -> float:
    """Best exact match over alternative gold answers."""
    return max((exact_match(prediction, g) for g in golds), default=0.0)


# ---- set answers (KBGym, PhantomWiki) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PRF:
    """Precision, recall and F1."""

    precision: float
    recall: float
    f1: float


def set_prf(pred: Iterable[str], gold: Iterable[str]) -> PRF:
    """Set precision/recall/F1 of already-normalised items; two empty sets score 1."""
    ps, gs = set(pred), set(gold)
    if not ps and not gs:
        return PRF(1.0, 1.0, 1.0)
    hit = len(ps & gs)
    p = hit / len(ps) if ps else 0.0
    r = hit / len(gs) if gs else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return PRF(p, r, f)


def split_list(prediction: str) -> list[str]:
    """A free-text list answer split into items on commas, semicolons, newlines and ' and '."""
    parts = re.split(r"[,;\n]|\band\b", prediction)
    return [p.strip() for p in parts if p.strip()]


def set_f1(prediction: str, golds: Iterable[str]) -> PRF:
    """KBGym grading: the prediction's items against the gold set, SQuAD-normalised."""
    pred = {squad_normalize(x) for x in split_list(prediction)} - {""}
    gold = {squad_normalize(x) for x in golds} - {""}
    return set_prf(pred, gold)


def pw_normalize(prediction: str, sep: str = ",") -> set[str]:
    """PhantomWiki's normalisation: split on `sep`, strip, lower-case, deduplicate."""
    return {p.strip().lower() for p in prediction.split(sep)}


def pw_set_f1(prediction: str, golds: Iterable[str], sep: str = ",") -> PRF:
    """PhantomWiki grading: set precision/recall/F1 of the prediction against the gold list."""
    pred = pw_normalize(prediction, sep)
    gold = {g.strip().lower() for g in golds}
    hit = len(pred & gold)
    p = hit / len(pred) if pred else 0.0
    r = hit / len(gold) if gold else 0.0
    return PRF(p, r, 2 * p * r / (p + r) if p + r else 0.0)


# ---- LoCoMo --------------------------------------------------------------------------------

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
LOCOMO_ABSTAIN_PHRASES = ("no information available", "not mentioned")


def locomo_normalize(text: str) -> str:
    """LoCoMo's normalisation: drop commas, lower-case, drop punctuation, a/an/the/and, spaces."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the|and)\b", " ", text)
    return " ".join(text.split())


def _stem(tokens: list[str]) -> list[str]:
    from nltk.stem import PorterStemmer  # the stemmer LoCoMo's evaluation uses

    stemmer = PorterStemmer()
    return [stemmer.stem(t) for t in tokens]


def locomo_token_f1(prediction: str, gold: str) -> float:
    """Porter-stemmed token F1 after LoCoMo normalisation."""
    pt, gt = _stem(locomo_normalize(prediction).split()), _stem(locomo_normalize(gold).split())
    if not pt or not gt:
        return 0.0
    return _f1_tokens(pt, gt)[2]


def locomo_multi_f1(prediction: str, gold: str) -> float:
    """Multi-hop: mean over comma-separated gold parts of the best F1 against prediction parts."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(locomo_token_f1(p, g) for p in preds) for g in golds) / len(golds)


def locomo_score(prediction: str, gold: str, category: int) -> float:
    """LoCoMo's per-category score.

    1 (multi-hop): `locomo_multi_f1`; 2, 3, 4: `locomo_token_f1`, where for 3
    only the gold's first ';'-separated part counts; 5 (adversarial): 1 when
    the prediction says "no information available" or "not mentioned".
    """
    if category not in LOCOMO_CATEGORIES:
        raise ValueError(f"LoCoMo category must be one of {sorted(LOCOMO_CATEGORIES)} (got {category!r})")
    if category == 5:
        low = prediction.lower()
        return float(any(p in low for p in LOCOMO_ABSTAIN_PHRASES))
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return locomo_multi_f1(prediction, gold)
    return locomo_token_f1(prediction, gold)


# ---- HotpotQA ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EMPRF:
    """Exact match with precision, recall and F1."""

    em: float
    precision: float
    recall: float
    f1: float


def hotpot_answer(prediction: str, gold: str) -> EMPRF:
    """HotpotQA answer metrics: SQuAD-normalised, and yes/no/noanswer must match exactly."""
    np_, ng = squad_normalize(prediction), squad_normalize(gold)
    em = float(np_ == ng)
    special = ("yes", "no", "noanswer")
    if (np_ in special or ng in special) and np_ != ng:
        return EMPRF(em, 0.0, 0.0, 0.0)
    p, r, f = _f1_tokens(np_.split(), ng.split())
    return EMPRF(em, p, r, f)


def hotpot_sp(prediction: Iterable[Sequence], gold: Iterable[Sequence]) -> EMPRF:
    """Supporting-fact metrics over (title, sentence id) pairs."""
    ps = {(str(t), int(i)) for t, i in prediction}
    gs = {(str(t), int(i)) for t, i in gold}
    tp, fp, fn = len(ps & gs), len(ps - gs), len(gs - ps)
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return EMPRF(float(fp + fn == 0), p, r, f)


def hotpot_joint(answer: EMPRF, sp: EMPRF) -> EMPRF:
    """Joint metrics: products of answer and supporting-fact precision, recall and EM."""
    p, r = answer.precision * sp.precision, answer.recall * sp.recall
    f = 2 * p * r / (p + r) if p + r else 0.0
    return EMPRF(answer.em * sp.em, p, r, f)


# ---- LLM judge -----------------------------------------------------------------------------


def judge_prompt(question: str, response: str, reference: str) -> str:
    """A grading prompt: does the response's final answer agree with the reference answer?"""
    return (
        "You grade an answer against a reference.\n\n"
        f"Question: {question}\n\n"
        f"Response: {response}\n\n"
        f"Reference answer: {reference}\n\n"
        "State the final answer the response gives (or 'None'), explain briefly whether it "
        "matches the reference in meaning (small wording or numeric-format differences are fine; "
        "a missing, partial or contradicting answer is not), then end with exactly one line:\n"
        "correct: yes\nor\ncorrect: no"
    )


def parse_judge(text: str) -> bool | None:
    """The verdict of a judge's reply: True, False, or None when no `correct: yes|no` line is found."""
    found = re.findall(r"correct\**\s*:\s*\**\s*(yes|no)\b", text, flags=re.IGNORECASE)
    if not found:
        return None
    return found[-1].lower() == "yes"


def judge_accuracy(verdicts: Sequence[bool | None]) -> float:
    """Failure-inclusive accuracy: unparsed verdicts (None) count as wrong."""
    if not verdicts:
        raise ValueError("judge_accuracy needs at least one verdict")
    return sum(1 for v in verdicts if v) / len(verdicts)


# ---- dispatch ------------------------------------------------------------------------------


def score(metric: str, prediction: str, answers: Sequence[str], category: int | None = None) -> float:
    """The headline score (F1) of a prediction under a question's `metric` (not `judge`)."""
    if metric == "set_f1":
        return set_f1(prediction, answers).f1
    if metric == "pw_set_f1":
        return pw_set_f1(prediction, answers).f1
    if metric == "squad_f1":
        return squad_f1(prediction, answers)
    if metric == "locomo_f1":
        if category is None or not answers:
            raise ValueError("locomo_f1 needs the question's category and one gold answer")
        return locomo_score(prediction, answers[0], category)
    if metric == "judge":
        raise ValueError("metric 'judge' needs an LLM verdict: use judge_prompt and parse_judge")
    raise ValueError(f"unknown metric {metric!r}")
