"""score_answer dispatch over the official scorers, and abstention."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.datasets import scoring as official
from librarian.datasets.records import Question
from librarian.rewards import (
    ScoringError,
    abstains,
    abstention_score,
    abstention_stats,
    answer_scores,
    hotpot_em_f1,
    score_answer,
)


def q(metric, answers, **extra):
    return Question(id="q1", question="Who?", answers=answers, split="test", qclass="c", template="t",
                    collection="c", metric=metric, extra=extra)


def test_set_f1_partial_and_complete():
    gold = ["Ada Moss", "Bo Li", "Cy Ng"]
    assert score_answer(q("set_f1", gold), "Ada Moss, Bo Li and Cy Ng") == 1.0
    s = answer_scores(q("set_f1", gold), "Ada Moss, Dee Roe")
    assert s.precision == pytest.approx(0.5) and s.recall == pytest.approx(1 / 3)
    assert s.score == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3)) and s.em == 0.0


def test_pw_set_f1_uses_phantomwiki_normalisation():
    assert score_answer("pw_set_f1", " Ada ,bo", ["ada", "Bo"]) == 1.0
    assert score_answer("pw_set_f1", "Ada and Bo", ["ada", "bo"]) == 0.0  # PhantomWiki splits on commas only


def test_squad_alternatives_take_the_best():
    question = q("squad_f1", ["the Eiffel Tower", "Tour Eiffel"])
    s = answer_scores(question, "Eiffel Tower")
    assert s.score == 1.0 and s.em == 1.0


def test_locomo_reads_category_from_the_question():
    question = q("locomo_f1", ["painting"], category="5")
    assert score_answer(question, "Not mentioned in the conversation") == 1.0
    assert score_answer(q("locomo_f1", ["7 May 2023"], category="2"), "7 May 2023") == 1.0
    with pytest.raises(ScoringError, match="category"):
        score_answer(q("locomo_f1", ["x"]), "x")


def test_judge_metric_needs_a_judge_and_counts_none_as_wrong():
    question = q("judge", ["42"])
    with pytest.raises(ScoringError, match="judge"):
        score_answer(question, "42")
    assert score_answer(question, "42", judge=lambda qt, golds, resp: resp in golds) == 1.0
    assert score_answer(question, "41", judge=lambda qt, golds, resp: None) == 0.0


def test_bad_inputs_name_the_problem():
    with pytest.raises(ScoringError, match="unknown metric"):
        score_answer("bleu", "x", ["x"])
    with pytest.raises(ScoringError, match="answers"):
        score_answer("squad_f1", "x")
    with pytest.raises(ScoringError, match="string"):
        score_answer("squad_f1", 3, ["x"])  # type: ignore[arg-type]


def test_no_answer_scores_zero():
    assert score_answer("squad_f1", None, ["Paris"]) == 0.0


@settings(deadline=None)
@given(st.text(max_size=30), st.lists(st.text(min_size=1, max_size=15), min_size=1, max_size=4))
def test_dispatch_equals_official_scorers(pred, golds):
    assert score_answer("squad_f1", pred, golds) == official.squad_f1(pred, golds)
    assert score_answer("set_f1", pred, golds) == official.set_f1(pred, golds).f1
    assert 0.0 <= score_answer("pw_set_f1", pred, golds) <= 1.0


def test_hotpot_yes_no_rule():
    assert hotpot_em_f1("yes", "yes") == (1.0, 1.0)
    assert hotpot_em_f1("yes it is", "yes") == (0.0, 0.0)


@pytest.mark.parametrize("text", ["unknown", "Unknown.", "I don't know", "It cannot be determined",
                                  "No information available", "not mentioned", "", None, "insufficient evidence"])
def test_abstains(text):
    assert abstains(text)


@pytest.mark.parametrize("text", ["Ada Moss", "3", "Port Avel", "the known world"])
def test_answers_are_not_abstentions(text):
    assert not abstains(text)


def test_abstention_score_and_stats():
    assert abstention_score("unknown", answerable=False) == 1.0
    assert abstention_score("unknown", answerable=True) == 0.0
    assert abstention_score("Ada", answerable=True) == 1.0
    stats = abstention_stats(["unknown", "Ada", "unknown", "Bo"], [False, False, True, True])
    assert stats.precision == 0.5 and stats.recall == 0.5 and stats.rate == 0.5
    with pytest.raises(ValueError, match="length"):
        abstention_stats(["x"], [True, False])
