"""Embedded backend specifics: persistence, the vector store, tantivy details, embedders."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.search import EmbeddedIndex, HashingEmbedder, IndexFormatError, SearchError
from librarian.search.base import SearchFilters
from librarian.search.embedders import make_embedder, normalize_rows
from librarian.search.vectors import VectorStore
from librarian.workspace import Node


def node(node_id, text, path=None, kind="raw"):
    return Node(id=node_id, path=path or f"{node_id}.md", kind=kind, text=text)


def test_staged_writes_are_invisible_until_refresh():
    index = EmbeddedIndex("t", HashingEmbedder(16))
    index.upsert([node("a", "alpha")])
    index.refresh()
    index.upsert([node("a", "beta")])
    index.delete(["zzz"])
    assert [h.text for h in index.search("alpha")] == ["alpha"]
    assert index.search("beta") == []
    index.refresh()
    assert [h.text for h in index.search("beta")] == ["beta"] and index.search("alpha") == []


def test_path_prefix_with_regex_characters():
    index = EmbeddedIndex("t")
    index.upsert([node("a", "report", path="q1 (draft)+/a[1].md"), node("b", "report", path="q1 (draft)x/b.md"),
                  node("c", "report", path="q1/c.md")])
    index.refresh()
    assert [h.id for h in index.search("report", path_prefix="q1 (draft)+/")] == ["a"]
    assert sorted(h.id for h in index.search("report", path_prefix="q1 (draft)")) == ["a", "b"]
    assert sorted(h.id for h in index.search("report", path_prefix="q1")) == ["a", "b", "c"]


def test_save_refuses_staged_writes(tmp_path):
    index = EmbeddedIndex("t")
    index.upsert([node("a", "alpha")])
    with pytest.raises(SearchError, match="refresh"):
        index.save(tmp_path)


def test_round_trip_keeps_hits_and_pending_embeddings(tmp_path):
    index = EmbeddedIndex("t", HashingEmbedder(16))
    index.upsert([node("a", "apple orchard"), node("b", "stock market", kind="synthetic")])
    index.refresh()
    index.upsert([node("c", "apple pie")])
    index.refresh(embed=False)
    index.save(tmp_path / "ix", extra={"note": 1})
    loaded = EmbeddedIndex.load(tmp_path / "ix", HashingEmbedder(16))
    assert loaded.pending_embeddings == 1 and loaded.count() == 3
    for mode in ("bm25", "dense", "hybrid"):
        assert loaded.search("apple", mode=mode) == index.search("apple", mode=mode)
    assert json.loads((tmp_path / "ix" / "manifest.json").read_text())["extra"] == {"note": 1}
    assert not list((tmp_path / "ix").glob("*.tmp"))


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(IndexFormatError, match="manifest.json is missing"):
        EmbeddedIndex.load(tmp_path)
    index = EmbeddedIndex("t", HashingEmbedder(16))
    index.upsert([node("a", "apple")])
    index.refresh()
    index.save(tmp_path)
    with pytest.raises(IndexFormatError, match="hashing-16"):
        EmbeddedIndex.load(tmp_path, HashingEmbedder(8))
    (tmp_path / "manifest.json").write_text('{"format": 99}')
    with pytest.raises(IndexFormatError, match="format 99"):
        EmbeddedIndex.load(tmp_path)


def test_bm25_only_index_gains_vectors_when_loaded_with_an_embedder(tmp_path):
    index = EmbeddedIndex("t")
    index.upsert([node("a", "apple orchard")])
    index.refresh()
    index.save(tmp_path)
    loaded = EmbeddedIndex.load(tmp_path, HashingEmbedder(16))
    assert loaded.pending_embeddings == 1
    loaded.refresh()
    assert [h.id for h in loaded.search("apple orchard", mode="dense")] == ["a"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefghij"), st.booleans()), max_size=40))
def test_vector_store_matches_a_dict_model(ops):
    rng = np.random.default_rng(0)
    store, model = VectorStore(4, capacity=2), {}
    for node_id, put in ops:
        if put:
            vec = normalize_rows(rng.normal(size=(1, 4)))[0]
            store.put(node_id, "raw", node_id, vec)
            model[node_id] = vec
        else:
            store.remove([node_id])
            model.pop(node_id, None)
    assert len(store) == len(model) and set(store.export()[0]) == set(model)
    query = normalize_rows(rng.normal(size=(1, 4)))[0]
    expected = sorted(model, key=lambda i: -float(model[i] @ query))
    got = store.top(query, 100)
    assert [i for i, _ in got] == expected
    assert all(0.0 <= s <= 1.0 for _, s in got)


def test_vector_store_filters_and_zero_vectors():
    store = VectorStore(2)
    store.put("a", "raw", "x/a", np.array([1.0, 0.0]))
    store.put("b", "synthetic", "y/b", np.array([0.0, 1.0]))
    store.put("c", "raw", "x/c", np.zeros(2))  # no direction: not stored
    assert "c" not in store
    q = np.array([1.0, 0.0])
    assert [i for i, _ in store.top(q, 5, SearchFilters(kinds=("synthetic",)))] == ["b"]
    store.relabel("b", "synthetic", "x/b")
    assert [i for i, _ in store.top(q, 5, SearchFilters(path_prefix="x/"))] == ["a", "b"]


def test_hashing_embedder_is_deterministic_and_unit_length():
    emb = HashingEmbedder(32)
    a = emb.encode(["Dogs running", "the", "dog runs"])
    assert a.shape == (3, 32) and a.dtype == np.float32
    assert np.allclose(np.linalg.norm(a[[0, 2]], axis=1), 1.0) and not a[1].any()
    assert np.allclose(a[0], a[2])  # same analysed terms
    assert np.array_equal(a, HashingEmbedder(32).encode(["Dogs running", "the", "dog runs"]))


def test_make_embedder_names():
    assert make_embedder("none") is None and make_embedder("hashing", 8).dim == 8
    with pytest.raises(ValueError, match="unknown embedder"):
        make_embedder("bert")


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts the texts it encodes."""

    def __init__(self) -> None:
        super().__init__(32)
        self.encoded: list[str] = []

    def encode(self, texts):
        self.encoded.extend(texts)
        return super().encode(texts)


def test_repeated_queries_are_embedded_once_and_give_the_same_hits():
    emb = CountingEmbedder()
    index = EmbeddedIndex("q", emb)
    index.upsert([node("a", "apple orchard"), node("b", "stock market"), node("c", "apple pie")])
    index.refresh()
    first = index.search("apple", k=3, mode="dense")
    again = index.search("apple", k=3, mode="hybrid")
    assert [h.id for h in first] == [h.id for h in index.search("apple", k=3, mode="dense")]
    assert emb.encoded.count("apple") == 1 and again
    index.search("market", k=3, mode="dense")
    assert emb.encoded.count("market") == 1
    index.clear_query_cache()
    index.search("apple", k=3, mode="dense")
    assert emb.encoded.count("apple") == 2
