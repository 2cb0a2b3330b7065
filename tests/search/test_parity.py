"""BM25 parity: the embedded and Elasticsearch backends agree on the top 10."""

from __future__ import annotations

import pytest

from librarian.search import EmbeddedIndex
from librarian.search.synthetic import make_corpus, overlap_at_k

pytestmark = pytest.mark.elasticsearch


def test_bm25_top10_overlap_on_1000_docs_and_50_queries(es_index_factory, record_property):
    corpus = make_corpus(1000, 50, words_per_doc=(5, 40), seed=11)
    embedded = EmbeddedIndex("parity")
    remote = es_index_factory()
    for index in (embedded, remote):
        index.upsert(corpus.nodes)
        index.refresh()
    overlaps, identical = [], 0
    for query in corpus.queries:
        a = [h.id for h in embedded.search(query, k=10)]
        b = [h.id for h in remote.search(query, k=10)]
        assert a, f"query {query!r} found nothing"
        overlaps.append(overlap_at_k(a, b, 10))
        identical += a == b
    mean = sum(overlaps) / len(overlaps)
    record_property("parity_overlap_at_10", mean)
    print(f"BM25 parity: mean overlap@10 = {mean:.3f}, identical top-10 lists: {identical}/50")
    assert mean >= 0.9


def test_bm25_scores_agree(es_index_factory):
    corpus = make_corpus(200, 10, seed=5)
    embedded = EmbeddedIndex("scores")
    remote = es_index_factory()
    for index in (embedded, remote):
        index.upsert(corpus.nodes)
        index.refresh()
    for query in corpus.queries:
        a = embedded.search(query, k=3)
        b = remote.search(query, k=3)
        assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-3)
