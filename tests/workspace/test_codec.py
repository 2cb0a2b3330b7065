"""The Arrow codec: schema, round trips, files, content hash, and every rejection path."""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.workspace import (
    CreateFile,
    Delete,
    Link,
    MakeDir,
    MergeFiles,
    Node,
    SnapshotFormatError,
    SnapshotMeta,
    Workspace,
    WorkspaceError,
    codec,
)

META = SnapshotMeta(step=7, next_serial=12, raw_policy="editable")


def sample_nodes() -> list[Node]:
    return [
        Node("n0", "raw", "directory", "", flag="authored"),
        Node("r1", "raw/r1.txt", "raw", "Ünïcödé — 漢字 🙂\nline 2", origin="r1", flag="untouched"),
        Node("r2", "raw/r2.txt", "raw", "", origin="r2", flag="edited", created_step=0, deleted_step=5),
        Node("s1", "idx.md", "synthetic", "index", links=("r1", "s2"), provenance=("r1",), absorbed=("o9", "o8"),
             created_step=3),
        Node("s2", "idx.md/child", "synthetic", "child\n\n", origin=None, created_step=4),
    ]


# --- schema and round trip -----------------------------------------------------------


def test_schema_columns_types_and_metadata():
    table = codec.nodes_to_table(sample_nodes(), META)
    assert table.column_names == list(codec.COLUMNS)
    assert table.schema.field("kind").type == pa.dictionary(pa.int8(), pa.string())
    assert table.schema.field("links").type == pa.list_(pa.string())
    assert table.schema.field("deleted_step").type == pa.int64()
    assert table.schema.field("deleted_step").nullable and not table.schema.field("id").nullable
    md = table.schema.metadata
    assert md[b"librarian.schema_version"] == b"1"
    assert (md[b"librarian.step"], md[b"librarian.next_serial"], md[b"librarian.raw_policy"]) == (b"7", b"12", b"editable")
    assert table.column("deleted_step").to_pylist() == [None, None, 5, None, None]
    assert table.column("links").to_pylist()[3] == ["r1", "s2"]


def test_table_round_trip_is_identity():
    nodes, meta = codec.table_to_nodes(codec.nodes_to_table(sample_nodes(), META))
    assert nodes == sample_nodes()
    assert meta == META
    assert all(isinstance(n.links, tuple) and isinstance(n.absorbed, tuple) for n in nodes)


def test_empty_snapshot_round_trips():
    table = codec.nodes_to_table([], SnapshotMeta())
    assert table.num_rows == 0
    assert codec.from_ipc_bytes(codec.table_to_ipc_bytes(table)) == ([], SnapshotMeta())


def test_ipc_bytes_round_trip():
    data = codec.to_ipc_bytes(sample_nodes(), META)
    assert isinstance(data, bytes)
    assert codec.from_ipc_bytes(data) == (sample_nodes(), META)


def test_parquet_and_ipc_files_round_trip(tmp_path):
    pq_path = codec.write_parquet(sample_nodes(), META, tmp_path / "sub" / "snap.parquet")
    ipc_path = codec.write_ipc(sample_nodes(), META, tmp_path / "snap.arrow")
    assert codec.read_parquet(pq_path) == (sample_nodes(), META)
    assert codec.read_ipc(ipc_path) == (sample_nodes(), META)
    assert sorted(os.listdir(tmp_path)) == ["snap.arrow", "sub"]  # no temporary files left


def test_workspace_round_trip_keeps_hash_and_state(tmp_path, curated):
    ws = curated
    nodes, meta = ws.state()
    assert any(not n.active for n in nodes)
    path = codec.write_parquet(nodes, meta, tmp_path / "ws.parquet")
    back = Workspace.from_state(*codec.read_parquet(path))
    assert back.state() == ws.state()
    assert codec.content_hash(*back.state()) == codec.content_hash(*ws.state())
    via_ipc = Workspace.from_state(*codec.from_ipc_bytes(codec.to_ipc_bytes(nodes, meta)))
    assert via_ipc.state() == ws.state()


def test_castable_variants_are_accepted():
    table = codec.nodes_to_table(sample_nodes(), META)
    plain = table.set_column(2, "kind", table.column("kind").cast(pa.string()))
    plain = plain.set_column(3, "text", plain.column("text").cast(pa.large_string()))
    reordered = plain.select(list(reversed(codec.COLUMNS))).replace_schema_metadata(table.schema.metadata)
    assert codec.table_to_nodes(reordered)[0] == sample_nodes()


# --- content hash ------------------------------------------------------------------------------


def test_content_hash_is_sha256_and_order_independent():
    nodes = sample_nodes()
    h = codec.content_hash(nodes, META)
    assert len(h) == 64 and int(h, 16) >= 0
    shuffled = nodes[:]
    random.Random(1).shuffle(shuffled)
    assert codec.content_hash(shuffled, META) == h
    assert codec.table_content_hash(codec.nodes_to_table(nodes, META)) == h


@pytest.mark.parametrize(
    "change",
    [
        lambda n: Node(n.id, n.path, n.kind, n.text + " "),
        lambda n: Node(n.id, n.path + "x", n.kind, n.text),
        lambda n: Node(n.id, n.path, n.kind, n.text, links=("r1",)),
        lambda n: Node(n.id, n.path, n.kind, n.text, provenance=("r1",)),
        lambda n: Node(n.id, n.path, n.kind, n.text, deleted_step=9),
        lambda n: Node(n.id, n.path, n.kind, n.text, origin="o"),
        lambda n: Node(n.id, n.path, n.kind, n.text, flag="edited"),
        lambda n: Node(n.id, n.path, n.kind, n.text, absorbed=("o",)),
        lambda n: Node(n.id, n.path, n.kind, n.text, created_step=1),
    ],
)
def test_content_hash_sees_every_field(change):
    base = [Node("a", "a.md", "synthetic", "text")]
    assert codec.content_hash([change(base[0])], META) != codec.content_hash(base, META)


def test_content_hash_sees_meta():
    nodes = sample_nodes()
    assert codec.content_hash(nodes, META) != codec.content_hash(nodes, SnapshotMeta(8, 12, "editable"))
    assert codec.content_hash(nodes, META) != codec.content_hash(nodes, SnapshotMeta(7, 12, "immutable"))


# --- rejection paths -----------------------------------------------------------------------------


def _with_metadata(snapshot: pa.Table, **changes: bytes | None) -> pa.Table:
    md = dict(snapshot.schema.metadata)
    for key, value in changes.items():
        full = f"librarian.{key}".encode()
        if value is None:
            md.pop(full)
        else:
            md[full] = value
    return snapshot.replace_schema_metadata(md)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"schema_version": b"99"}, "unknown snapshot schema version 99"),
        ({"schema_version": None}, "librarian.schema_version"),
        ({"schema_version": b"one"}, "not an integer"),
        ({"raw_policy": b"loose"}, "raw_policy"),
        ({"step": None}, "librarian.step"),
        ({"table": b"trace"}, "not a snapshot"),
    ],
)
def test_bad_metadata_is_rejected(changes, needle):
    table = _with_metadata(codec.nodes_to_table(sample_nodes(), META), **changes)
    with pytest.raises(SnapshotFormatError, match=needle):
        codec.table_to_nodes(table, "snap.parquet")


def test_missing_and_extra_columns_are_named():
    table = codec.nodes_to_table(sample_nodes(), META)
    with pytest.raises(SnapshotFormatError, match=r"missing column\(s\) \['links'\]"):
        codec.validate_table(table.drop_columns(["links"]))
    with pytest.raises(SnapshotFormatError, match=r"unexpected column\(s\) \['extra'\]"):
        codec.validate_table(table.append_column("extra", pa.array([1] * table.num_rows)))


def test_wrong_types_and_values_are_rejected():
    table = codec.nodes_to_table(sample_nodes(), META)
    md = table.schema.metadata
    bad_type = table.set_column(4, "links", pa.array([1] * table.num_rows)).replace_schema_metadata(md)
    with pytest.raises(SnapshotFormatError, match="column 'links' has type int64"):
        codec.validate_table(bad_type)
    kinds = pa.array(["raw", "raw", "raw", "folder", "raw"])
    with pytest.raises(SnapshotFormatError, match=r"column 'kind' has unknown value\(s\) \['folder'\]"):
        codec.validate_table(table.set_column(2, "kind", kinds).replace_schema_metadata(md))
    ids = pa.array(["a", "a", "b", "c", "d"])
    with pytest.raises(SnapshotFormatError, match="duplicate ids"):
        codec.validate_table(table.set_column(0, "id", ids).replace_schema_metadata(md))
    nulls = pa.array(["a", None, "b", "c", "d"])
    with pytest.raises(SnapshotFormatError, match="column 'id' has null values"):
        codec.validate_table(table.set_column(0, "id", nulls).replace_schema_metadata(md))


def test_unencodable_nodes_are_rejected():
    with pytest.raises(SnapshotFormatError, match="cannot be encoded"):
        codec.nodes_to_table([Node("a", "a", "synthetic", "bad \ud800 surrogate")], META)
    with pytest.raises(SnapshotFormatError, match="unknown node kind 'folder'"):
        codec.nodes_to_table([Node("a", "a", "folder", "")], META)  # type: ignore[arg-type]
    with pytest.raises(SnapshotFormatError, match="unknown ledger flag"):
        codec.nodes_to_table([Node("a", "a", "raw", "", flag="new")], META)  # type: ignore[arg-type]
    with pytest.raises(SnapshotFormatError, match="cannot be hashed"):
        codec.content_hash([Node("a", "a", "synthetic", "\udfff")], META)
    assert issubclass(SnapshotFormatError, WorkspaceError)


@pytest.mark.parametrize("kind", ["parquet", "ipc"])
def test_corrupt_files_name_the_file(tmp_path, kind):
    path = tmp_path / f"snap.{kind}"
    writer, reader = (codec.write_parquet, codec.read_parquet) if kind == "parquet" else (codec.write_ipc, codec.read_ipc)
    writer(sample_nodes(), META, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotFormatError, match=str(path)):
        reader(path)
    path.write_bytes(b"not a snapshot at all")
    with pytest.raises(SnapshotFormatError, match=str(path)):
        reader(path)
    with pytest.raises(FileNotFoundError, match="no snapshot file"):
        reader(tmp_path / "missing")


def test_parquet_without_schema_version_is_rejected(tmp_path):
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"id": ["a"], "path": ["a"]}), path)
    with pytest.raises(SnapshotFormatError, match=f"{path}: no 'librarian.schema_version'"):
        codec.read_parquet(path)


def test_ipc_bytes_garbage_is_rejected():
    with pytest.raises(SnapshotFormatError, match="IPC bytes: not a readable Arrow IPC stream"):
        codec.from_ipc_bytes(b"\x00garbage")


def test_failed_write_leaves_old_file_and_no_temporaries(tmp_path, monkeypatch):
    path = tmp_path / "snap.parquet"
    codec.write_parquet(sample_nodes(), META, path)
    before = path.read_bytes()

    def broken(table, where, **kwargs):
        with open(where, "wb") as fh:
            fh.write(b"PAR1 half")
        raise OSError("disk full")

    monkeypatch.setattr(codec.pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        codec.write_parquet(sample_nodes()[:1], META, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["snap.parquet"]


# --- property: the round trip is the identity ---------------------------------------------------

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_IDS = st.lists(st.text("abcxyz0123_-é", min_size=1, max_size=6), unique=True, min_size=0, max_size=12)


@st.composite
def node_sets(draw):
    ids = draw(_IDS)
    refs = st.lists(st.sampled_from(ids), max_size=4).map(tuple) if ids else st.just(())
    nodes = []
    for i, node_id in enumerate(ids):
        nodes.append(
            Node(
                id=node_id,
                path=f"p{i}/{draw(_TEXT.filter(bool)) if draw(st.booleans()) else node_id}",
                kind=draw(st.sampled_from(["raw", "synthetic", "directory"])),
                text=draw(_TEXT),
                links=draw(refs),
                provenance=draw(refs),
                origin=draw(st.none() | _TEXT),
                flag=draw(st.sampled_from(["untouched", "authored", "edited"])),
                absorbed=draw(st.lists(_TEXT, max_size=3).map(tuple)),
                created_step=draw(st.integers(0, 2**40)),
                deleted_step=draw(st.none() | st.integers(0, 2**40)),
            )
        )
    meta = SnapshotMeta(draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40)),
                        draw(st.sampled_from(["immutable", "editable"])))
    return nodes, meta


@settings(max_examples=60, deadline=None)
@given(node_sets())
def test_property_round_trip_identity_and_stable_hash(snapshot):
    nodes, meta = snapshot
    assert codec.from_ipc_bytes(codec.to_ipc_bytes(nodes, meta)) == (nodes, meta)
    assert codec.table_to_nodes(codec.nodes_to_table(nodes, meta)) == (nodes, meta)
    assert codec.content_hash(list(reversed(nodes)), meta) == codec.content_hash(nodes, meta)


# --- the incremental encoder ---------------------------------------------------------------------


def _same_table(a: pa.Table, b: pa.Table) -> bool:
    return a.equals(b) and a.schema.metadata == b.schema.metadata


def test_encoder_follows_a_curated_workspace(ws):
    encoder = codec.SnapshotEncoder()
    ops = [MakeDir("people", "People."), CreateFile("people/alice.md", "Alice.", ("f1", "f2")),
           CreateFile("people/bob.md", "Bob.", ("f3",)), Link("people/alice.md", "f4"),
           MergeFiles(("people/alice.md", "people/bob.md"), "people/friends.md", "Friends."),
           Delete("people/friends.md/bob.md")]
    assert _same_table(encoder.encode(*ws.state()), codec.nodes_to_table(*ws.state()))
    for op in ops:
        ws.apply(op)
        assert _same_table(encoder.encode(*ws.state()), codec.nodes_to_table(*ws.state()))


@settings(max_examples=40, deadline=None)
@given(first=node_sets(), second=node_sets(), keep=st.integers(0, 12), share=st.sampled_from([0.0, 0.5, 1.0]))
def test_property_encoder_equals_a_full_encode(first, second, keep, share):
    """Any next snapshot (kept prefix objects, replaced, appended or dropped rows) encodes exactly."""
    nodes1, meta1 = first
    nodes2, meta2 = second
    seen = {n.id for n in nodes1[:keep]}
    nodes2 = nodes1[:keep] + [n for n in nodes2 if n.id not in seen]
    encoder = codec.SnapshotEncoder(max_changed_share=share)
    encoder.encode(nodes1, meta1)
    assert _same_table(encoder.encode(nodes2, meta2), codec.nodes_to_table(nodes2, meta2))
    assert _same_table(encoder.encode(nodes2, meta2), codec.nodes_to_table(nodes2, meta2))
