"""Official scorers: known values and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from librarian.datasets import scoring as s

words = st.lists(st.sampled_from(["ada", "moss", "port", "avel", "the", "chess", "1952", "Bo", "Lin"]),
                 min_size=0, max_size=6).map(" ".join)
items = st.lists(st.sampled_from(["Ada Moss", "Bo Lin", "Cy Hale", "Dee Ray", "Eve Tam"]), max_size=5)


@given(words, words)
def test_token_f1_bounded_and_symmetric(a, b):
    f = s.token_f1(a, b)
    assert 0.0 <= f <= 1.0
    assert f == pytest.approx(s.token_f1(b, a))


@given(words)
def test_token_f1_of_itself_is_one(a):
    assert s.token_f1(a, a) == 1.0 and s.exact_match(a, a) == 1.0


def test_squad_known_values():
    assert s.squad_normalize("The  Port, Avel!") == "port avel"
    assert s.token_f1("Port Avel city", "port avel") == pytest.approx(0.8)
    assert s.squad_f1("arborist", ["baker", "an arborist"]) == 1.0
    assert s.squad_em("baker", ["arborist"]) == 0.0


@given(items, items)
def test_set_f1_bounds_and_perfect(pred, gold):
    r = s.set_f1(", ".join(pred), gold)
    assert 0.0 <= r.precision <= 1.0 and 0.0 <= r.recall <= 1.0 and 0.0 <= r.f1 <= 1.0
    if set(pred) == set(gold):
        assert r.f1 == 1.0


@given(items)
def test_set_f1_ignores_order_and_separators(gold):
    assert s.set_f1(" and ".join(reversed(gold)), gold).f1 == s.set_f1("; ".join(gold), gold).f1


def test_set_f1_partial():
    r = s.set_f1("Ada Moss, Bo Lin", ["Ada Moss", "Cy Hale"])
    assert (r.precision, r.recall, r.f1) == (0.5, 0.5, 0.5)


@given(items, items)
def test_pw_set_f1_matches_set_prf(pred, gold):
    if not pred or not gold:
        return
    r = s.pw_set_f1(",".join(pred), gold)
    ref = s.set_prf({p.lower() for p in pred}, {g.lower() for g in gold})
    assert r.f1 == pytest.approx(ref.f1)


def test_pw_set_f1_is_case_and_space_insensitive():
    assert s.pw_set_f1(" ada moss ,BO LIN", ["Ada Moss", "Bo Lin"]).f1 == 1.0
    assert s.pw_set_f1("Ada Moss", ["Ada Moss", "Bo Lin"]).recall == 0.5


def test_locomo_categories():
    # "she ran in park" vs "ran park": precision 2/4, recall 2/2
    assert s.locomo_score("She ran in the park", "ran park", 4) == pytest.approx(2 / 3)
    assert s.locomo_token_f1("running", "runs") == 1.0  # Porter stems both to "run"
    assert s.locomo_score("Paris; or maybe Rome", "Paris; Rome", 3) == pytest.approx(s.locomo_token_f1("Paris; or maybe Rome", "Paris"))
    assert s.locomo_score("paris, rome", "rome, paris", 1) == 1.0
    assert s.locomo_score("paris", "rome, paris", 1) == 0.5
    assert s.locomo_score("That is not mentioned anywhere", "x", 5) == 1.0
    assert s.locomo_score("Paris", "x", 5) == 0.0
    with pytest.raises(ValueError, match="category"):
        s.locomo_score("a", "b", 7)


@given(words, words, st.sampled_from([1, 2, 3, 4, 5]))
def test_locomo_score_bounded(a, b, c):
    assert 0.0 <= s.locomo_score(a, b or "x", c) <= 1.0


def test_hotpot_answer_yes_no_rule():
    assert s.hotpot_answer("yes", "no").f1 == 0.0
    assert s.hotpot_answer("yes it is", "yes").f1 == 0.0
    assert s.hotpot_answer("The Eiffel Tower", "Eiffel Tower").em == 1.0


pairs = st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.integers(0, 3)), max_size=6)


@given(pairs, pairs)
def test_hotpot_sp_em_iff_equal_sets(p, g):
    r = s.hotpot_sp(p, g)
    assert (r.em == 1.0) == (set(p) == set(g))
    assert 0.0 <= r.f1 <= 1.0


def test_hotpot_joint():
    a = s.hotpot_answer("Paris", "Paris")
    sp = s.hotpot_sp([("A", 0)], [("A", 0), ("B", 1)])
    j = s.hotpot_joint(a, sp)
    assert j.em == 0.0 and j.precision == 1.0 and j.recall == 0.5


def test_judge_parse_and_accuracy():
    assert "Reference answer: 42" in s.judge_prompt("q?", "it is 42", "42")
    assert s.parse_judge("extracted: 42\ncorrect: yes") is True
    assert s.parse_judge("**correct:** No") is False
    assert s.parse_judge("I think so") is None
    assert s.judge_accuracy([True, False, None, True]) == 0.5
    with pytest.raises(ValueError):
        s.judge_accuracy([])


def test_score_dispatch():
    assert s.score("set_f1", "Ada Moss", ["Ada Moss"]) == 1.0
    assert s.score("pw_set_f1", "ada moss", ["Ada Moss"]) == 1.0
    assert s.score("squad_f1", "Ada", ["Ada Moss"]) == pytest.approx(2 / 3)
    assert s.score("locomo_f1", "not mentioned", ["x"], category=5) == 1.0
    with pytest.raises(ValueError, match="judge"):
        s.score("judge", "a", ["b"])
