"""The pieces of online curation on disk: the append-only Parquet log and the versions of a build folder."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from librarian.app.traffic_log import GroupCommit
from librarian.online.log import LogFormatError, PartLog
from librarian.online.versions import VersionStore
from librarian.workspace import Add, Document, Workspace, codec, replay, write_trace
from librarian.workspace.errors import WorkspaceError

SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64())])


def test_a_part_log_appends_whole_parts_and_reads_each_row_once(tmp_path: Path) -> None:
    log = PartLog(tmp_path / "log", SCHEMA, "id")
    assert log.read().num_rows == 0 and log.append([]) is None
    log.append([{"id": "a", "n": 1}, {"id": "b", "n": 2}])
    log.append([{"id": "c", "n": 3}])
    with pytest.raises(LogFormatError, match="does not fit"):
        log.append([{"id": "d", "n": "not a number"}])
    assert [r["id"] for r in log.rows()] == ["a", "b", "c"]  # the bad row wrote nothing
    assert not list((tmp_path / "log").glob(".*tmp"))
    assert log.compact() == 2 and len(log.parts()) == 1
    log.append([{"id": "e", "n": 5}])
    assert [r["id"] for r in log.rows()] == ["a", "b", "c", "e"]
    other = PartLog(tmp_path / "log", SCHEMA, "id")  # another reader: each row once, then only new ones
    assert [r["id"] for r in other.read_new()] == ["a", "b", "c", "e"] and other.read_new() == []
    log.append([{"id": "f", "n": 6}])
    assert [r["id"] for r in other.read_new()] == ["f"]


def test_a_part_of_another_schema_is_named(tmp_path: Path) -> None:
    PartLog(tmp_path / "log", pa.schema([pa.field("x", pa.string())]), "x").append([{"x": "1"}])
    with pytest.raises(LogFormatError, match="missing column"):
        PartLog(tmp_path / "log", SCHEMA, "id").read()


def test_group_commit_writes_every_row_of_many_threads_exactly_once(tmp_path: Path) -> None:
    log = PartLog(tmp_path / "log", SCHEMA, "id")
    commit = GroupCommit(log)

    def writer(k: int) -> None:
        for i in range(50):
            commit.write({"id": f"{k}-{i}", "n": i})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r for p in log.parts() for r in pq.read_table(p).column("id").to_pylist()]
    assert sorted(ids) == sorted(f"{k}-{i}" for k in range(8) for i in range(50))  # raw: no duplicates at all


def _build(folder: Path) -> Workspace:
    ws = Workspace.from_documents([Document(f"d{i}", f"Fact number {i}.", path=f"facts/d{i}") for i in range(5)])
    folder.mkdir()
    codec.write_parquet(*ws.state(), folder / "initial.parquet")
    codec.write_parquet(*ws.state(), folder / "snapshot.parquet")
    write_trace(ws.trace, folder / "trace.parquet")
    return ws


def test_versions_chain_their_traces_and_head_moves_atomically(tmp_path: Path) -> None:
    initial = _build(tmp_path / "w")
    store = VersionStore(tmp_path / "w")
    assert store.head() == 0 and store.numbers() == [0]
    saved: list[Path] = []
    parent = store.load(0)
    for k in range(2):
        ws = parent.copy()
        ws.apply(Add(f"Index {k}", links=("d1", "d2"), path=f"indexes/i{k}"))
        number = store.commit(ws, k, lambda d: (d.mkdir(), saved.append(d)), {"reason": f"round {k}"})
        assert number == k + 1 and store.head() == k  # committed, not yet served
        store.set_head(number, "test")
        parent = store.load(number)
    assert store.head() == 2 and store.numbers() == [0, 1, 2] and store.lineage(2) == [0, 1, 2]
    assert store.info(2)["parent"] == 1 and store.info(2)["ops"] == 1
    assert replay(store.load(1), store.trace(2)).content_hash() == store.info(2)["snapshot_hash"]
    assert replay(initial, store.full_trace(2)).content_hash() == parent.content_hash()
    with pytest.raises(WorkspaceError, match="no version 7; versions: 0, 1, 2"):
        store.set_head(7, "no such")
    assert store.head() == 2
    (store.root / "HEAD.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(WorkspaceError, match="unreadable"):
        store.head()


def test_a_failed_commit_leaves_no_version_behind(tmp_path: Path) -> None:
    _build(tmp_path / "w")
    store = VersionStore(tmp_path / "w")
    ws = store.load(0)
    ws.apply(Add("Index", links=("d1",), path="indexes/x"))

    def broken(_folder: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.commit(ws, 0, broken, {})
    assert store.numbers() == [0] and list((store.root / "versions").iterdir()) == []


def test_a_folder_without_a_snapshot_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a build folder"):
        VersionStore(tmp_path)
