"""SnapshotView: a read-only NodeSource over Arrow columns that answers like the live Workspace."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from librarian.workspace import (
    CreateFile,
    Delete,
    Document,
    Link,
    MakeDir,
    MergeFiles,
    Move,
    Node,
    NodeSource,
    SnapshotFormatError,
    SnapshotMeta,
    Workspace,
    WorkspaceError,
    codec,
    views,
)
from librarian.workspace.snapshot_view import SnapshotView


def view_of(ws: Workspace) -> SnapshotView:
    return SnapshotView.from_ipc_bytes(codec.to_ipc_bytes(*ws.state()))


def assert_same_source(view: SnapshotView, ws: Workspace) -> None:
    nodes, meta = ws.state()
    assert view.meta == meta
    assert len(view) == len(ws)
    assert sorted(view, key=lambda n: n.id) == sorted(ws, key=lambda n: n.id)
    assert view.all_nodes() == nodes
    for node in nodes:
        assert view.get(node.id) == ws.get(node.id)
        assert view.by_path(node.path) == ws.by_path(node.path)
        assert view.children(node.path) == ws.children(node.path)
        assert view.child_count(node.path) == len(ws.children(node.path))
    assert view.children("") == ws.children("")
    assert view.get("ghost") is None and view.by_path("no/such") is None and view.children("no/such") == []


def test_view_is_a_node_source_equal_to_the_workspace(curated):
    view = view_of(curated)
    assert isinstance(view, NodeSource)
    assert_same_source(view, curated)


def test_tombstones_are_invisible_but_kept(curated):
    view = view_of(curated)
    dead = [n for n in curated.all_nodes() if not n.active]
    assert dead, "the fixture deletes a node"
    assert all(view.get(n.id) is None for n in dead)
    assert view.by_path("tmp.md").text == "second scratch at the same path"
    assert view.table.num_rows == len(curated.all_nodes())
    assert dead[0].id not in view and view.by_path("tmp.md").id in view
    assert view.node_at(view.table.column("id").to_pylist().index(dead[0].id)) == dead[0]


def test_indexes_are_built_lazily_and_separately(curated):
    view = view_of(curated)
    assert (view._id_index, view._path_index, view._child_rows) == (None, None, None)
    view.get("f1")
    assert view._id_index is not None and view._path_index is None and view._child_rows is None
    view.by_path("raw/f1.txt")
    assert view._path_index is not None and view._child_rows is None
    view.children("raw")
    assert view._child_rows is not None


def test_ipc_view_is_zero_copy_over_the_bytes(curated):
    data = codec.to_ipc_bytes(*curated.state())
    buf = pa.py_buffer(data)
    view = SnapshotView.from_ipc_bytes(buf)
    text_values = view.table.column("text").chunk(0).buffers()[2]
    assert buf.address <= text_values.address < buf.address + buf.size


def test_many_children_use_one_columnar_take():
    docs = [Document(f"d{i:03}", f"text {i}", path=f"big/d{i:03}.txt") for i in range(120)]
    ws = Workspace.from_documents(docs, raw_policy="editable")
    ws.apply(Move("big/d005.txt", "elsewhere.txt"))
    view = view_of(ws)
    kids = view.children("big")
    assert kids == ws.children("big") and len(kids) == 119
    assert [n.path for n in kids] == sorted(n.path for n in kids)


def test_constructors_agree(tmp_path, curated):
    nodes, meta = curated.state()
    pq_path = codec.write_parquet(nodes, meta, tmp_path / "s.parquet")
    ipc_path = codec.write_ipc(nodes, meta, tmp_path / "s.arrow")
    views = [
        SnapshotView.from_parquet(pq_path),
        SnapshotView.from_ipc_file(ipc_path),
        SnapshotView.from_table(codec.nodes_to_table(nodes, meta)),
        SnapshotView.from_nodes(nodes, meta),
    ]
    for view in views:
        assert_same_source(view, curated)
    assert SnapshotView.from_ipc_bytes(views[0].to_ipc_bytes()).all_nodes() == nodes
    assert "active" in repr(views[0])


def test_chunked_tables_are_accepted(curated):
    table = codec.nodes_to_table(*curated.state())
    chunked = pa.concat_tables([table.slice(0, 3), table.slice(3)])
    assert chunked.column("id").num_chunks == 2
    assert_same_source(SnapshotView.from_table(chunked), curated)


def test_bad_snapshots_are_rejected(tmp_path):
    with pytest.raises(SnapshotFormatError, match="IPC bytes"):
        SnapshotView.from_ipc_bytes(b"nope")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 nothing here")
    with pytest.raises(SnapshotFormatError, match="bad.parquet"):
        SnapshotView.from_parquet(bad)
    with pytest.raises(SnapshotFormatError, match="librarian.schema_version"):
        SnapshotView.from_table(pa.table({"id": ["a"]}))


# --- property: the view answers exactly like the workspace after random curation -----------------

_NAMES = st.sampled_from(["a", "b", "c.md", "idx", "ü"])
_PATHS = st.lists(_NAMES, min_size=1, max_size=3).map("/".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_view_matches_workspace_after_random_ops(data, docs):
    ws = Workspace.from_documents(docs)
    for _ in range(data.draw(st.integers(0, 12))):
        ids = sorted(n.id for n in ws)
        ref = st.sampled_from(ids)
        op = data.draw(
            st.one_of(
                st.builds(CreateFile, _PATHS, st.text(max_size=20), st.lists(ref, max_size=3).map(tuple)),
                st.builds(MakeDir, _PATHS, st.text(max_size=20)),
                st.builds(Link, ref, ref),
                st.builds(Delete, ref),
                st.builds(Move, ref, _PATHS),
                st.builds(MergeFiles, st.lists(ref, min_size=1, max_size=2).map(tuple), _PATHS, st.text(max_size=9)),
            )
        )
        try:
            ws.apply(op)
        except WorkspaceError:  # anything else fails the test
            pass
    assert_same_source(view_of(ws), ws)


def test_handoff_benchmark_runs_small_and_its_handoffs_agree(tmp_path):
    """A smoke run of benchmarks/workspace_bench.py (the figures themselves are not asserted)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "workspace_bench.py"
    spec = importlib.util.spec_from_file_location("workspace_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = bench.main(["--out", str(tmp_path), "--nodes", "1500", "--links", "3000", "--ops", "150",
                          "--repeats", "1"])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["replay_identical"] is True and saved["replay_ops"] == 150
    assert saved["workspace_nodes"] >= 1500 and saved["args"]["links"] == 3000
    for key in ("handoff_arrow_vs_json_speedup", "handoff_arrow_vs_pickle_speedup", "replay_10k_ops_s", "peak_rss_mb"):
        assert saved[key] == pytest.approx(results[key]) and saved[key] > 0


def test_empty_and_all_deleted_snapshots():
    for nodes in ([], [Node("a", "a", "synthetic", "x", deleted_step=1), Node("b", "a/b", "synthetic", "", deleted_step=1)]):
        view = SnapshotView.from_nodes(nodes, SnapshotMeta())
        assert (len(view), list(view), view.children(""), view.child_count("a")) == (0, [], [], 0)
        assert views.ls(view).text == "ls /: 0 entries"
        assert views.tree(view).text == "/"
