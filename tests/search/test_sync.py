"""IndexSync: an index follows a workspace's trace (only ops since the last sync)."""

from __future__ import annotations

import pytest

from librarian.search import EmbeddedIndex, HashingEmbedder, IndexSync
from librarian.workspace import Add, Delete, Document, Edit, MakeDir, Move, Workspace

DOCS = [
    Document("alice", "Alice Johnson's job is arborist.", path="people/alice.md"),
    Document("bob", "Bob Stone's hobby is astronomy.", path="people/bob.md"),
    Document("carol", "Carol Reed lives in Dorringham.", path="people/carol.md"),
]


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that records the batches it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(32)
        self.batches: list[list[str]] = []

    def encode(self, texts):
        self.batches.append(list(texts))
        return super().encode(texts)


def ids(hits):
    return [h.id for h in hits]


@pytest.fixture
def followed(make_backend):
    ws = Workspace.from_documents(DOCS, raw_policy="editable")
    index = make_backend()
    sync = IndexSync(index, ws)
    sync.end_iteration()
    return ws, index, sync


def test_initial_sync_indexes_every_active_node(followed):
    ws, index, sync = followed
    assert index.count() == len(ws) and sync.version == ws.version
    assert ids(index.search("astronomy hobby")) == ["bob"]
    assert ids(index.search("astronomy hobby", mode="dense"))[0] == "bob"


def test_ops_since_last_sync_reach_the_index(followed):
    ws, index, sync = followed
    ws.apply(Add(text="Dorringham residents: Carol Reed.", path="indexes/dorringham.md"))
    added = ws.by_path("indexes/dorringham.md").id
    ws.apply(Edit(target="alice", text="Alice Johnson's job is beekeeper."))
    ws.apply(Delete(target="bob"))
    ws.apply(Move(target="carol", new_path="towns/carol.md"))
    ws.apply(MakeDir(path="towns/info", readme="Towns of the universe and their residents."))
    changes = sync.sync()
    assert "bob" in changes.deleted and {"alice", "carol", added} <= changes.upserted
    assert index.count() == len(ws)
    assert ids(index.search("astronomy")) == []
    assert ids(index.search("arborist")) == [] and ids(index.search("beekeeper")) == ["alice"]
    assert ids(index.search("Dorringham", path_prefix="indexes/")) == [added]
    assert index.search("Carol Reed lives", k=1)[0].path == "towns/carol.md"
    assert index.search("universe residents", kinds=["directory"])[0].path == "towns/info"


def test_embeddings_wait_for_the_end_of_the_iteration(make_backend):
    ws = Workspace.from_documents(DOCS, raw_policy="editable")
    embedder = CountingEmbedder()
    index = make_backend(embedder=embedder)
    sync = IndexSync(index, ws)
    sync.end_iteration()
    assert len(embedder.batches) == 1 and len(embedder.batches[0]) == 3  # the empty folder README is skipped
    ws.apply(Add(text="A note about telescopes.", path="notes/t.md"))
    ws.apply(Edit(target="alice", text="Alice Johnson's job is beekeeper."))
    ws.apply(Move(target="carol", new_path="towns/carol.md"))  # same text: no re-embedding
    sync.sync()
    assert index.pending_embeddings == 2 and len(embedder.batches) == 1
    sync.sync()  # nothing new
    sync.end_iteration()
    assert sorted(embedder.batches[1]) == ["A note about telescopes.", "Alice Johnson's job is beekeeper."]
    assert index.pending_embeddings == 0


def test_save_and_load_beside_a_snapshot(tmp_path):
    ws = Workspace.from_documents(DOCS, raw_policy="editable")
    sync = IndexSync(EmbeddedIndex("ws", HashingEmbedder(32)), ws)
    sync.end_iteration()
    ws.apply(Delete(target="bob"))
    sync.end_iteration()
    sync.save(tmp_path / "search")
    # ids for every mode; dense scores too (BM25 statistics still count the deleted node until a merge)
    before = {m: [h.id for h in sync.index.search("Alice job", mode=m)] for m in ("bm25", "dense", "hybrid")}
    dense_before = [h.score for h in sync.index.search("Alice job", mode="dense")]

    embedder = CountingEmbedder()
    resumed = IndexSync.load(tmp_path / "search", ws, embedder, resume=True)
    assert resumed.version == ws.version and embedder.batches == []
    after = {m: [h.id for h in resumed.index.search("Alice job", mode=m)] for m in ("bm25", "dense", "hybrid")}
    assert after == before
    assert [h.score for h in resumed.index.search("Alice job", mode="dense")] == pytest.approx(dense_before)

    # a workspace restored from a snapshot (fresh trace) is reconciled, not trusted
    nodes, meta = ws.state()
    restored = Workspace.from_state(nodes, meta)
    embedder.batches.clear()
    reconciled = IndexSync.load(tmp_path / "search", restored, embedder)
    reconciled.end_iteration()
    assert reconciled.index.count() == len(restored) and embedder.batches == []  # nothing re-embedded
