"""The `SearchIndex` contract, run against both backends (embedded and Elasticsearch)."""

from __future__ import annotations

import pytest

from librarian.search import PAGE_SIZE, EmbedderMissingError, Hit, SearchError, SearchIndex, search_page
from librarian.workspace import Node

TEXTS = {
    "d0": "The quick brown fox jumps over the lazy dog.",
    "d1": "Foxes are running through the forest at night.",
    "d2": "A recipe for apple pie with cinnamon.",
    "d3": "The dog barked at the mailman every morning.",
    "d4": "Stock markets fell sharply on Tuesday.",
}


def node(node_id: str, text: str, path: str | None = None, kind: str = "raw", deleted: int | None = None) -> Node:
    return Node(id=node_id, path=path or f"docs/{node_id}.md", kind=kind, text=text, deleted_step=deleted)


def corpus() -> list[Node]:
    nodes = [node(i, t) for i, t in TEXTS.items()]
    nodes.append(node("n1", "Notes about foxes and dogs.", path="notes/foxes.md", kind="synthetic"))
    nodes.append(node("dir", "README: everything about animals, foxes included.", path="notes", kind="directory"))
    return nodes


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


@pytest.fixture
def index(make_backend) -> SearchIndex:
    index = make_backend()
    index.upsert(corpus())
    index.refresh()
    return index


def test_backend_satisfies_protocol(index):
    assert isinstance(index, SearchIndex)
    assert index.count() == 7
    assert index.pending_embeddings == 0


def test_bm25_finds_stemmed_terms_and_returns_hit_fields(index):
    hits = index.search("fox running", k=10)
    assert ids(hits)[0] == "d1"  # both "fox" (foxes) and "run" (running) match
    assert set(ids(hits)) == {"d0", "d1", "n1", "dir"}
    first = hits[0]
    assert (first.path, first.kind, first.text) == ("docs/d1.md", "raw", TEXTS["d1"])
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_directory_is_indexed_by_its_readme(index):
    hits = index.search("animals", k=5)
    assert ids(hits) == ["dir"] and hits[0].kind == "directory"


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_filters_on_kind_and_path_prefix(index, mode):
    synthetic = index.search("foxes dogs", k=10, mode=mode, kinds=["synthetic"])
    assert ids(synthetic) == ["n1"]
    under_notes = index.search("foxes", k=10, mode=mode, path_prefix="notes")
    assert set(ids(under_notes)) <= {"n1", "dir"} and "n1" in ids(under_notes)
    both = index.search("foxes", k=10, mode=mode, kinds=["raw", "directory"], path_prefix="notes")
    assert ids(both) == ["dir"]


def test_offset_pages_through_one_ranking(index):
    full = ids(index.search("the dog fox", k=10))
    assert len(full) >= 3
    assert ids(index.search("the dog fox", k=2, offset=1)) == full[1:3]
    assert index.search("the dog fox", k=5, offset=len(full)) == []


def test_delete_never_comes_back(index):
    index.delete(["d1", "n1"])
    index.refresh()
    for mode in ("bm25", "dense", "hybrid"):
        found = ids(index.search("foxes running forest", k=10, mode=mode))
        assert "d1" not in found and "n1" not in found, mode
    assert index.count() == 5
    index.delete(["does-not-exist"])  # unknown ids are ignored
    index.refresh()
    assert index.count() == 5


def test_inactive_node_upsert_is_a_delete(index):
    index.upsert([node("d4", TEXTS["d4"], deleted=3)])
    index.refresh()
    assert index.search("stock markets", k=5) == []


def test_edit_replaces_text_and_keeps_one_hit_per_id(index):
    index.upsert([node("d2", "A recipe for pear tart.")])
    index.refresh()
    assert index.search("apple cinnamon", k=5) == []
    hits = index.search("pear recipe", k=5)
    assert ids(hits) == ["d2"] and hits[0].text == "A recipe for pear tart."
    assert ids(index.search("pear recipe", k=5, mode="dense")).count("d2") == 1
    assert index.count() == 7


def test_move_changes_the_path_filters_see(index):
    index.upsert([node("d2", TEXTS["d2"], path="kitchen/pie.md")])
    index.refresh()
    for mode in ("bm25", "dense"):
        hits = index.search("apple pie", k=3, mode=mode, path_prefix="kitchen/")
        assert ids(hits)[:1] == ["d2"] and hits[0].path == "kitchen/pie.md", mode


def test_writes_apply_at_refresh_and_staged_deletes_win(make_backend):
    index = make_backend()
    index.upsert([node("a", "alpha beta"), node("b", "alpha gamma")])
    index.delete(["b"])
    assert index.staged_writes == 2
    index.refresh()
    assert index.staged_writes == 0
    assert ids(index.search("alpha", k=5)) == ["a"]


def test_embeddings_wait_for_the_batch(make_backend):
    index = make_backend()
    index.upsert([node("a", "apple orchard harvest")])
    index.refresh(embed=False)
    assert index.pending_embeddings == 1
    assert ids(index.search("apple", k=5)) == ["a"]  # BM25 sees the text at once
    assert index.search("apple orchard harvest", k=5, mode="dense") == []  # no vector yet
    index.refresh(embed=True)
    assert index.pending_embeddings == 0
    assert ids(index.search("apple orchard harvest", k=5, mode="dense")) == ["a"]


def test_edit_keeps_the_old_vector_until_the_batch(make_backend):
    index = make_backend()
    index.upsert([node("a", "apple orchard harvest"), node("b", "stock market crash")])
    index.refresh()
    index.upsert([node("a", "stock market rally")])
    index.refresh(embed=False)
    assert index.pending_embeddings == 1
    assert ids(index.search("apple orchard harvest", k=1, mode="dense")) == ["a"]  # stale vector
    assert index.search("apple orchard harvest", k=1, mode="dense")[0].text == "stock market rally"
    index.refresh()
    assert ids(index.search("apple orchard harvest", k=2, mode="dense")) != ["a"]


def test_unchanged_text_is_not_re_embedded(make_backend):
    index = make_backend()
    index.upsert([node("a", "apple orchard")])
    index.refresh()
    index.upsert([node("a", "apple orchard", path="moved/a.md")])  # a move: same text
    assert index.pending_embeddings == 0


def test_dense_ranks_the_identical_text_first(index):
    assert ids(index.search(TEXTS["d2"], k=1, mode="dense")) == ["d2"]
    hits = index.search(TEXTS["d2"], k=3, mode="dense")
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)  # cosine score (1 + cos) / 2


def test_hybrid_fuses_both_rankings(index):
    hits = index.search("recipe apple pie cinnamon", k=3, mode="hybrid")
    assert ids(hits)[0] == "d2"
    assert hits[0].score == pytest.approx(2 / 61, rel=1e-3)  # first in both lists: 1/61 + 1/61


def test_query_of_stop_words_only_finds_nothing(index):
    assert index.search("the and of", k=5) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"query": ""}, "non-empty"),
    ({"query": "fox", "k": 0}, r"k \(hits"),
    ({"query": "fox", "offset": -1}, "offset"),
    ({"query": "fox", "mode": "fuzzy"}, "mode"),
    ({"query": "fox", "kinds": ["folder"]}, "kinds"),
    ({"query": "fox", "k": 9_999, "offset": 2}, "at most"),
])
def test_bad_requests_name_the_argument(index, kwargs, message):
    with pytest.raises(SearchError, match=message):
        index.search(**kwargs)


def test_bad_writes_name_the_problem(index):
    with pytest.raises(SearchError, match="iterable of nodes"):
        index.upsert(node("x", "text"))
    with pytest.raises(SearchError, match="iterable of ids"):
        index.delete("d1")


def test_bm25_only_index_refuses_dense(make_backend):
    index = make_backend(embedder=None)
    index.upsert([node("a", "apple")])
    index.refresh()
    assert ids(index.search("apple")) == ["a"]
    with pytest.raises(EmbedderMissingError, match="embedder"):
        index.search("apple", mode="hybrid")


def test_pages_of_five_one_action_each(make_backend):
    index = make_backend()
    index.upsert([node(f"p{i:02d}", f"harbour report number {i} " + "harbour " * (i % 4)) for i in range(12)])
    index.refresh()
    full = ids(index.search("harbour", k=20))
    assert len(full) == 12
    pages = [search_page(index, "harbour", page) for page in (1, 2, 3)]
    assert [len(p.hits) for p in pages] == [PAGE_SIZE, PAGE_SIZE, 2]
    assert [p.has_more for p in pages] == [True, True, False]
    assert all(p.actions == 1 for p in pages)
    assert [h.id for p in pages for h in p.hits] == full
    assert search_page(index, "harbour", 4).hits == ()
    with pytest.raises(SearchError, match="page must be"):
        search_page(index, "harbour", 0)
