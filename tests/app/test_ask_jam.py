"""`librarian ask --reader jam`: the scripted JAM researcher over a memorized Memory-Gym workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from librarian.answering.answer import answer
from librarian.answering.config import AskConfig
from librarian.app.corpus import AskItem
from librarian.app.workspace_dir import open_workspace
from librarian.cli import main as cli
from librarian.datasets.memorygym import MemoryGymConfig, build_instances, synthesize_history
from librarian.roles.memorizer import Memorizer
from librarian.search import EmbeddedIndex, HashingEmbedder, IndexSync
from librarian.workspace import Document, codec


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """A memorized workspace saved as a build folder (snapshot, hashing-embedder index, manifest)."""
    _, sessions, ledger = synthesize_history(MemoryGymConfig(speakers=4, sessions=16, seed=3))
    ws = Memorizer().memorize([Document(s.id, s.text) for s in sessions])
    out = tmp_path_factory.mktemp("jam")
    codec.write_parquet(*ws.state(), out / "snapshot.parquet")
    sync = IndexSync(EmbeddedIndex("jam", HashingEmbedder(64)), ws)
    sync.end_iteration()
    sync.save(out / "index")
    (out / "workspace.json").write_text(json.dumps({"snapshot": "snapshot.parquet", "index": "index", "search": {
        "backend": "embedded", "embedder": "hashing", "hashing_dim": 64}}), encoding="utf-8")
    return out, build_instances(ledger)


def test_ask_jam_prints_context_files_read_and_sources(memory, capsys: pytest.CaptureFixture[str]) -> None:
    folder, questions = memory
    q = questions[0]
    assert cli(["ask", str(folder), q.question, "--reader", "jam", "--embedder", "hashing", "--trace"]) == 0
    text = capsys.readouterr().out
    assert f"Q: {q.question}\nA: " in text and "(no answer" not in text
    assert "sources (sufficient): sessions/" in text
    assert "provenance: memory/" in text and " -> sessions/" in text
    assert "browse(" in text and "finalize(" in text


def test_jam_records_trace_memos_back_to_the_raw_sessions(memory) -> None:
    folder, questions = memory
    opened = open_workspace(folder, embedder="hashing")
    items = [AskItem(f"q{i}", q.question, tuple(q.answers), q.metric) for i, q in enumerate(questions[:8])]
    records = answer(opened, items, AskConfig(reader="jam"))
    src = opened.source
    recall = []
    for rec, q in zip(records, questions, strict=False):
        assert rec["end"] == "answer" and rec["answer"] and rec["f1"] is not None
        assert all(p.startswith("sessions/") for p in rec["sources"])
        # every synthetic file read has a provenance chain from itself to a raw session
        memos = [p for p in rec["files_read"] if src.by_path(p).kind == "synthetic"]
        for path in memos:
            chains = rec["provenance"][path]
            assert chains and all(c[0] == path and c[-1].startswith("sessions/") for c in chains)
        want = {f"sessions/{s}" for s in q.support}
        recall.append(len(want & set(rec["sources"])) / len(want))
    assert any(rec["provenance"] for rec in records)
    assert sum(recall) / len(recall) >= 0.8


def test_jam_without_an_index_says_why(memory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = memory
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "snapshot.parquet").write_bytes((folder / "snapshot.parquet").read_bytes())
    assert cli(["ask", str(bare), "Where does anyone live?", "--reader", "jam"]) == 2
    assert "the jam reader searches, but no saved index" in capsys.readouterr().err
