"""The English analyzer (mirrors Elasticsearch's `english`) and the synthetic corpus."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from librarian.search.analysis import ENGLISH_STOP_WORDS, analyze, tokenize
from librarian.search.synthetic import make_corpus, overlap_at_k


def test_examples_match_elasticsearch_english():
    # expected tokens as Elasticsearch's `english` analyzer produces them
    text = "Alice's dogs were running happily through the U.S.A. in v1.2, paying 1,000 or 3.14 e-mail O'Neil"
    assert analyze(text) == ["alic", "dog", "were", "run", "happili", "through", "u.s.a", "v1.2", "pai",
                             "1,000", "3.14", "e", "mail", "o'neil"]


def test_original_porter_not_porter2():
    assert analyze("generously university organization news") == ["gener", "univers", "organ", "new"]


def test_han_characters_are_single_tokens():
    assert tokenize("日本語 text") == ["日", "本", "語", "text"]


@given(st.text(max_size=200))
def test_terms_are_lowercase_and_never_stop_words(text):
    terms = analyze(text)
    assert all(t and t == t.lower() or not t.isalpha() for t in terms)
    assert not set(terms) & ENGLISH_STOP_WORDS - {"thi", "wa"}  # stop words are removed before stemming


@given(st.lists(st.sampled_from(["dog", "cats", "running", "the", "a", "fox"]), max_size=20))
def test_analysis_is_concatenative_over_words(words):
    assert analyze(" ".join(words)) == [t for w in words for t in analyze(w)]


def test_corpus_is_deterministic_and_queries_match_documents():
    a = make_corpus(50, 10, seed=1)
    b = make_corpus(50, 10, seed=1)
    assert [n.text for n in a.nodes] == [n.text for n in b.nodes] and a.queries == b.queries
    vocab = {t for n in a.nodes for t in analyze(n.text)}
    assert all(set(analyze(q)) & vocab or not analyze(q) for q in a.queries)


@given(st.lists(st.text(max_size=3), max_size=12, unique=True), st.lists(st.text(max_size=3), max_size=12, unique=True))
def test_overlap_is_symmetric_and_bounded(a, b):
    assert overlap_at_k(a, b) == overlap_at_k(b, a)
    assert 0.0 <= overlap_at_k(a, b) <= 1.0
    assert overlap_at_k(a, a) == 1.0
