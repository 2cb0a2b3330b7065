"""Reciprocal rank fusion: worked example and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from librarian.search.fusion import reciprocal_rank_fusion

rankings = st.lists(st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8), min_size=1, max_size=4)


def test_worked_example():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "c", "a"]], rank_constant=60)
    assert [doc for doc, _ in fused] == ["b", "a", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    assert fused[1][1] == pytest.approx(1 / 61 + 1 / 63)


def test_window_cuts_each_list():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["c"]], window=2))
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62, "c": 1 / 61})


@given(rankings)
def test_scores_are_sums_of_reciprocal_ranks(lists):
    fused = dict(reciprocal_rank_fusion(lists, rank_constant=60))
    for doc, score in fused.items():
        expected = sum(1 / (60 + r.index(doc) + 1) for r in lists if doc in r)
        assert score == pytest.approx(expected)
    assert set(fused) == {d for r in lists for d in r}


@given(rankings)
def test_sorted_best_first_and_order_free_in_lists(lists):
    fused = reciprocal_rank_fusion(lists)
    scores = [s for _, s in fused]
    assert scores == sorted(scores, reverse=True)
    assert dict(reciprocal_rank_fusion(list(reversed(lists)))) == pytest.approx(dict(fused))


@given(st.lists(st.sampled_from("abcdef"), unique=True, min_size=1))
def test_one_list_keeps_its_order(ranking):
    assert [d for d, _ in reciprocal_rank_fusion([ranking])] == ranking


def test_bad_arguments():
    with pytest.raises(ValueError, match="twice"):
        reciprocal_rank_fusion([["a", "a"]])
    with pytest.raises(ValueError, match="rank_constant"):
        reciprocal_rank_fusion([["a"]], rank_constant=0)
