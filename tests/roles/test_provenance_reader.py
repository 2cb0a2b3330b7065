"""The reader that treats an index as navigation with provenance (paper 000's faithful fallback): raw documents are
the evidence, to a retrieval depth; an index can add members but never take the flat store's answer away.

Each test here fails with the reader that takes an index as the whole truth (`trust: index`)."""

from __future__ import annotations

import pytest

from librarian.models import make_backend
from librarian.models.scripted.reader import KBGymKnowledge
from librarian.roles import ToolContext, ToolEnv, kbgym_reader, run_episode
from librarian.search import EmbeddedIndex, IndexSync
from librarian.workspace import CreateFile, Document, Workspace, views

QUESTION = "How many people live in Port Avel?"


def store(members: int, others: tuple[str, ...] = ("Ada Ray lives in Dunmore.", "Ben Lu's job is baker.")):
    facts = [f"Person{i} Moss lives in Port Avel." for i in range(members)] + list(others)
    ws = Workspace.from_documents([Document(f"f{i:02d}", t, path=f"f{i:02d}") for i, t in enumerate(facts)])
    index = EmbeddedIndex("provenance-reader")
    sync = IndexSync(index, ws)
    sync.sync()
    return ws, index, sync


def index_of(ws, sync, members: list[int], path: str = "index/city-port-avel.md") -> None:
    text = "\n".join(f"f{i:02d}: Person{i} Moss lives in Port Avel." for i in members)
    ws.apply(CreateFile(path, text, tuple(f"f{i:02d}" for i in members)))
    sync.sync()


def ask(ws, index, trust: str, depth: int = 0, budget: int = 6, sources: bool = True):
    role = kbgym_reader(budget=budget, memory_window=30)
    backend = make_backend("scripted", policy="kbgym_reader", trust=trust, depth=depth)
    return run_episode(ToolEnv(role, ToolContext(ws, index, read_sources=sources), f"Question: {QUESTION}"), backend,
                       role)


def test_a_partial_index_keeps_the_flat_answer_under_provenance_trust_and_breaks_it_under_index_trust():
    ws, index, sync = store(9)
    assert ask(ws, index, "provenance", depth=10).answer == "9"  # the flat store: two pages, 9
    assert ask(ws, index, "index").answer == "9"
    index_of(ws, sync, [0, 1, 2, 3])  # 4 of the 9
    assert ask(ws, index, "provenance", depth=10).answer == "9"  # raw pages first: the flat answer stays
    broken = ask(ws, index, "index")  # the index taken as the whole truth: it stops paging, the count breaks
    assert broken.answer != "9" and int(broken.answer) < 9


def test_beyond_the_retrieval_depth_only_an_index_that_names_the_key_adds_members():
    ws, index, sync = store(8)
    assert ask(ws, index, "provenance", depth=5).answer == "5"  # the flat store misses: depth 5 of 8
    index_of(ws, sync, list(range(8)))
    read = ask(ws, index, "provenance", depth=5)
    assert read.answer == "8"
    assert [c["name"] for t in read.turns for c in t.calls][-2:] == ["read", "answer"]  # pages first, then the index
    ws2, index2, sync2 = store(8)
    index_of(ws2, sync2, list(range(8)), path="notes/file-0.md")  # the same file, a name that does not say the key
    assert ask(ws2, index2, "provenance", depth=5).answer == "5"


def test_only_raw_text_is_evidence_an_index_claiming_more_than_its_sources_adds_nothing():
    ws, index, sync = store(8)
    members = list(range(8))
    claims = "\n".join(f"Person{i} Moss lives in Port Avel." for i in range(20))  # 20 claimed, 8 cited
    ws.apply(CreateFile("index/city-port-avel.md", claims, tuple(f"f{i:02d}" for i in members)))
    sync.sync()
    assert ask(ws, index, "provenance", depth=5).answer == "8"
    assert ask(ws, index, "index").answer == "20"


def test_provenance_trust_needs_the_reads_to_show_sources_and_settings_are_checked():
    ws, index, sync = store(8)
    index_of(ws, sync, list(range(8)))
    assert ask(ws, index, "provenance", depth=5, sources=False).answer == "5"  # nothing raw in the read
    with pytest.raises(ValueError, match="trust must be one of"):
        KBGymKnowledge([], trust="blind")
    with pytest.raises(ValueError, match="depth"):
        KBGymKnowledge([], depth=-1)
    with pytest.raises(ValueError, match="no setting colour"):
        make_backend("scripted", policy="kbgym_reader", colour="red")


def test_a_kbgym_read_with_sources_shows_each_raw_source_once():
    ws, _, sync = store(3)
    index_of(ws, sync, [0, 1, 2])
    node = ws.by_path("index/city-port-avel.md")
    plain = views.read(ws, node.id, mode="kbgym")
    shown = views.read(ws, node.id, mode="kbgym", sources=True)
    assert "=== source:" not in plain.text
    assert shown.text.count("=== source: [raw]") == 3 and shown.cost.raw_touched == 3
    assert shown.text.startswith(plain.text)
