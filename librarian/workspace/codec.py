"""The Arrow codec: a workspace snapshot <-> `pyarrow.Table`, Parquet and IPC files.

A snapshot is every node (tombstones included, in the store's insertion
order) plus its `SnapshotMeta`. One row per node; the columns are `SCHEMA`
below (documented in docs/workspace.md, "Arrow schema"). The schema metadata
carries `librarian.schema_version` and the `SnapshotMeta` fields. Reading
checks all of it: a corrupt file, a missing or mistyped column, bad values or
an unknown schema version raise `SnapshotFormatError` naming the file.
Writes are atomic (a temporary file in the same folder, then a rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter, is_
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from librarian.workspace.errors import SnapshotFormatError
from librarian.workspace.nodes import FLAGS, NODE_KINDS, Node, SnapshotMeta

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS: frozenset[int] = frozenset({1})
RAW_POLICIES: tuple[str, ...] = ("immutable", "editable")

_KEY_VERSION = b"librarian.schema_version"
_KEY_TABLE = b"librarian.table"
_KEY_STEP = b"librarian.step"
_KEY_SERIAL = b"librarian.next_serial"
_KEY_POLICY = b"librarian.raw_policy"

_STR_LIST = pa.list_(pa.string())
_KIND_TYPE = pa.dictionary(pa.int8(), pa.string())
_FLAG_TYPE = pa.dictionary(pa.int8(), pa.string())

# Column order is part of the format; the first five are what an agent may see.
SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("kind", _KIND_TYPE, nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("links", _STR_LIST, nullable=False),
        pa.field("provenance", _STR_LIST, nullable=False),
        pa.field("origin", pa.string(), nullable=True),
        pa.field("flag", _FLAG_TYPE, nullable=False),
        pa.field("absorbed", _STR_LIST, nullable=False),
        pa.field("created_step", pa.int64(), nullable=False),
        pa.field("deleted_step", pa.int64(), nullable=True),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
_NON_NULL = tuple(f.name for f in SCHEMA if not f.nullable)

_KIND_DICT = pa.array(list(NODE_KINDS), pa.string())
_FLAG_DICT = pa.array(list(FLAGS), pa.string())
_KIND_INDEX = {k: i for i, k in enumerate(NODE_KINDS)}
_FLAG_INDEX = {f: i for i, f in enumerate(FLAGS)}

_ROW = attrgetter(*COLUMNS)
_GETTERS = tuple(attrgetter(c) for c in COLUMNS)


def _meta_bytes(meta: SnapshotMeta) -> dict[bytes, bytes]:
    return {
        _KEY_VERSION: str(SCHEMA_VERSION).encode(),
        _KEY_TABLE: b"snapshot",
        _KEY_STEP: str(meta.step).encode(),
        _KEY_SERIAL: str(meta.next_serial).encode(),
        _KEY_POLICY: meta.raw_policy.encode(),
    }


def _str_list_array(values: Sequence[tuple[str, ...]]) -> pa.Array:
    """A list<string> column from tuples (pyarrow converts sequences natively)."""
    return pa.array(values, _STR_LIST)


def _dict_array(values: Sequence[str], index: dict[str, int], dictionary: pa.Array, what: str) -> pa.Array:
    try:
        codes = [index[v] for v in values]
    except KeyError as err:
        raise SnapshotFormatError(f"unknown {what} {err.args[0]!r}; expected one of {sorted(index)}") from None
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), dictionary)


def nodes_to_table(nodes: Iterable[Node], meta: SnapshotMeta) -> pa.Table:
    """Encode nodes (tombstones included, order kept) and meta as one Arrow table.

    Built column by column: one pass transposes the nodes into column tuples.
    Raises `SnapshotFormatError` for a value the format cannot hold (an unknown
    kind or flag, text that is not valid Unicode).
    """
    if meta.raw_policy not in RAW_POLICIES:
        raise SnapshotFormatError(f"raw_policy {meta.raw_policy!r} is not one of {RAW_POLICIES}")
    nodes = nodes if isinstance(nodes, Sequence) else list(nodes)
    ids, paths, kinds, texts, links, prov, origins, flags, absorbed, created, deleted = (
        list(map(getter, nodes)) for getter in _GETTERS
    )
    try:
        arrays = [
            pa.array(ids, pa.string()),
            pa.array(paths, pa.string()),
            _dict_array(kinds, _KIND_INDEX, _KIND_DICT, "node kind"),
            pa.array(texts, pa.string()),
            _str_list_array(links),
            _str_list_array(prov),
            pa.array(origins, pa.string()),
            _dict_array(flags, _FLAG_INDEX, _FLAG_DICT, "ledger flag"),
            _str_list_array(absorbed),
            pa.array(created, pa.int64()),
            pa.array(deleted, pa.int64()),
        ]
    except (UnicodeEncodeError, pa.ArrowException, TypeError, OverflowError) as err:
        raise SnapshotFormatError(f"a node cannot be encoded as Arrow: {err}") from None
    return pa.Table.from_arrays(arrays, schema=SCHEMA.with_metadata(_meta_bytes(meta)))


def _where(source: str | None) -> str:
    return f"{source}: " if source else ""


def _read_int(metadata: dict[bytes, bytes], key: bytes, source: str | None) -> int:
    raw = metadata.get(key)
    if raw is None:
        raise SnapshotFormatError(f"{_where(source)}schema metadata lacks {key.decode()!r}")
    try:
        return int(raw.decode())
    except (UnicodeDecodeError, ValueError):
        raise SnapshotFormatError(f"{_where(source)}schema metadata {key.decode()!r} is {raw!r}, not an integer") from None


def meta_from_schema(schema: pa.Schema, source: str | None = None) -> SnapshotMeta:
    """Check the schema version and read the `SnapshotMeta` stored in the schema metadata."""
    metadata = schema.metadata or {}
    if _KEY_VERSION not in metadata:
        raise SnapshotFormatError(
            f"{_where(source)}no {_KEY_VERSION.decode()!r} in the schema metadata; not a librarian snapshot"
        )
    version = _read_int(metadata, _KEY_VERSION, source)
    if version not in SUPPORTED_SCHEMA_VERSIONS:
        raise SnapshotFormatError(
            f"{_where(source)}unknown snapshot schema version {version}; this build reads {sorted(SUPPORTED_SCHEMA_VERSIONS)}"
        )
    table_kind = metadata.get(_KEY_TABLE, b"snapshot")
    if table_kind != b"snapshot":
        raise SnapshotFormatError(f"{_where(source)}holds a {table_kind.decode(errors='replace')!r} table, not a snapshot")
    policy = metadata.get(_KEY_POLICY, b"").decode(errors="replace")
    if policy not in RAW_POLICIES:
        raise SnapshotFormatError(f"{_where(source)}raw_policy {policy!r} is not one of {RAW_POLICIES}")
    step = _read_int(metadata, _KEY_STEP, source)
    serial = _read_int(metadata, _KEY_SERIAL, source)
    return SnapshotMeta(step=step, next_serial=serial, raw_policy=policy)  # type: ignore[arg-type]


def validate_table(table: pa.Table, source: str | None = None) -> tuple[pa.Table, SnapshotMeta]:
    """Check a snapshot table and return it in canonical form (column order, types) with its meta.

    Accepts castable type variants (a plain string `kind`, `large_string`
    text); raises `SnapshotFormatError` naming `source` and the problem.
    """
    meta = meta_from_schema(table.schema, source)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise SnapshotFormatError(f"{_where(source)}missing column(s) {missing}; a snapshot has {list(COLUMNS)}")
    extra = [c for c in table.column_names if c not in COLUMNS]
    if extra:
        raise SnapshotFormatError(f"{_where(source)}unexpected column(s) {extra}; a snapshot has {list(COLUMNS)}")
    table = table.select(list(COLUMNS))
    if table.schema.remove_metadata() != SCHEMA:
        columns = []
        for name, field in zip(COLUMNS, SCHEMA, strict=True):
            try:
                columns.append(table.column(name).cast(field.type))
            except (pa.ArrowException, NotImplementedError):
                raise SnapshotFormatError(
                    f"{_where(source)}column {name!r} has type {table.schema.field(name).type}, expected {field.type}"
                ) from None
        table = pa.Table.from_arrays(columns, schema=SCHEMA)
    for name in _NON_NULL:
        if table.column(name).null_count:
            raise SnapshotFormatError(f"{_where(source)}column {name!r} has null values; it must not")
    for name in ("links", "provenance", "absorbed"):
        if pc.list_flatten(table.column(name)).null_count:
            raise SnapshotFormatError(f"{_where(source)}column {name!r} has null list items")
    for name, allowed in (("kind", NODE_KINDS), ("flag", FLAGS)):
        bad = _dictionary_values(table.column(name)) - set(allowed)
        if bad:
            raise SnapshotFormatError(f"{_where(source)}column {name!r} has unknown value(s) {sorted(bad, key=str)}; allowed {list(allowed)}")
    if pc.count_distinct(table.column("id")).as_py() != table.num_rows:
        raise SnapshotFormatError(f"{_where(source)}column 'id' has duplicate ids")
    return table.replace_schema_metadata(_meta_bytes(meta)), meta


def _dictionary_values(column: pa.ChunkedArray) -> set[str]:
    """The values a dictionary column uses (only the small dictionaries are decoded)."""
    values: set[str] = set()
    for chunk in column.chunks:
        if chunk.dictionary.null_count or len(chunk.dictionary) > 64:
            chunk = chunk.dictionary.take(pc.unique(chunk.indices))
            values.update(chunk.to_pylist())
        else:
            values.update(chunk.dictionary.to_pylist())
    return values


def table_to_nodes(table: pa.Table, source: str | None = None) -> tuple[list[Node], SnapshotMeta]:
    """Decode a snapshot table into nodes (row order kept) and its meta."""
    table, meta = validate_table(table, source)
    return decode_rows(table), meta


LIST_COLUMNS = tuple(i for i, f in enumerate(SCHEMA) if f.type == _STR_LIST)


def decode_rows(table: pa.Table) -> list[Node]:
    """The rows of a canonical snapshot table as nodes, decoded column by column."""
    cols: list[list[object]] = []
    for i, column in enumerate(table.select(list(COLUMNS)).columns):
        values = column.to_pylist()
        cols.append(list(map(tuple, values)) if i in LIST_COLUMNS else values)
    return list(map(Node, *cols))


class SnapshotEncoder:
    """Encodes successive snapshots of one workspace, converting only the rows that changed.

    A rollout worker snapshots its workspace every few turns and few nodes
    change in between. Nodes are frozen, so a position that still holds the
    very object encoded last time keeps its row; replaced and new positions
    are converted and the table is reassembled with one columnar `take`.
    The result always equals `nodes_to_table(nodes, meta)`.
    """

    def __init__(self, max_changed_share: float = 0.5) -> None:
        self.max_changed_share = max_changed_share
        self._nodes: list[Node] = []
        self._table: pa.Table | None = None

    def encode(self, nodes: Iterable[Node], meta: SnapshotMeta) -> pa.Table:
        """The snapshot table of `nodes` and `meta`."""
        nodes = list(nodes)
        old, table = self._nodes, self._table
        keep = min(len(old), len(nodes))
        changed = [] if table is None else [i for i, same in enumerate(map(is_, nodes[:keep], old)) if not same]
        changed.extend(range(keep, len(nodes)))
        if table is None or len(changed) > self.max_changed_share * max(len(nodes), 1):
            result = nodes_to_table(nodes, meta)
        else:
            fresh = nodes_to_table([nodes[i] for i in changed], meta).replace_schema_metadata(None)
            table = table.replace_schema_metadata(None)
            pieces, start = [], 0
            for j, i in enumerate(changed):  # unchanged runs are zero-copy slices
                if i > start:
                    pieces.append(table.slice(start, i - start))
                pieces.append(fresh.slice(j, 1))
                start = i + 1
            if start < len(nodes):
                pieces.append(table.slice(start, len(nodes) - start))
            result = pa.concat_tables(pieces or [fresh]).combine_chunks().replace_schema_metadata(_meta_bytes(meta))
        self._nodes, self._table = nodes, result
        return result


# --- files and bytes ---------------------------------------------------------


def _atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> Path:
    """Call `write(tmp)` on a temporary file next to `path`, then rename it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_parquet(nodes: Iterable[Node], meta: SnapshotMeta, path: str | os.PathLike[str]) -> Path:
    """Write a snapshot as a Parquet file, atomically; returns the path."""
    table = nodes_to_table(nodes, meta)
    return _atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def read_parquet(path: str | os.PathLike[str]) -> tuple[list[Node], SnapshotMeta]:
    """Read a snapshot Parquet file (see `read_parquet_table`)."""
    return table_to_nodes(read_parquet_table(path), str(path))


def read_parquet_table(path: str | os.PathLike[str]) -> pa.Table:
    """Read and validate a snapshot Parquet file as an Arrow table."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no snapshot file at {str(path)!r}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise SnapshotFormatError(f"{path}: not a readable Parquet file ({err})") from None
    return validate_table(table, str(path))[0]


def table_to_ipc_bytes(table: pa.Table) -> bytes:
    """Serialise a snapshot table to Arrow IPC stream bytes (one record batch)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return sink.getvalue().to_pybytes()


def to_ipc_bytes(nodes: Iterable[Node], meta: SnapshotMeta) -> bytes:
    """Serialise a snapshot to Arrow IPC stream bytes."""
    return table_to_ipc_bytes(nodes_to_table(nodes, meta))


def table_from_ipc_bytes(data: bytes | pa.Buffer, source: str | None = None) -> pa.Table:
    """Read and validate Arrow IPC stream bytes as a snapshot table (zero-copy over `data`)."""
    try:
        table = ipc.open_stream(pa.py_buffer(data) if isinstance(data, bytes) else data).read_all()
    except (pa.ArrowException, OSError) as err:
        raise SnapshotFormatError(f"{_where(source)}not a readable Arrow IPC stream ({err})") from None
    return validate_table(table, source)[0]


def from_ipc_bytes(data: bytes | pa.Buffer) -> tuple[list[Node], SnapshotMeta]:
    """Decode Arrow IPC stream bytes into nodes and meta."""
    return table_to_nodes(table_from_ipc_bytes(data, "IPC bytes"), "IPC bytes")


def write_ipc(nodes: Iterable[Node], meta: SnapshotMeta, path: str | os.PathLike[str]) -> Path:
    """Write a snapshot as an Arrow IPC stream file, atomically; returns the path."""
    data = to_ipc_bytes(nodes, meta)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    return _atomic_write(path, write)


def read_ipc_table(path: str | os.PathLike[str]) -> pa.Table:
    """Read and validate an Arrow IPC snapshot file as a table (memory-mapped)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no snapshot file at {str(path)!r}")
    try:
        source = pa.memory_map(str(path), "r")
        table = ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError) as err:
        raise SnapshotFormatError(f"{path}: not a readable Arrow IPC stream ({err})") from None
    return validate_table(table, str(path))[0]


def read_ipc(path: str | os.PathLike[str]) -> tuple[list[Node], SnapshotMeta]:
    """Read an Arrow IPC snapshot file into nodes and meta."""
    return table_to_nodes(read_ipc_table(path), str(path))


# --- content hash ---------------------------------------------------------------


def content_hash(nodes: Iterable[Node], meta: SnapshotMeta) -> str:
    """The sha256 (hex) of a snapshot's canonical form.

    Canonical form: the UTF-8 bytes of compact JSON (`ensure_ascii=False`,
    separators ',' ':') of `{"v": SCHEMA_VERSION, "meta": [step, next_serial,
    raw_policy], "nodes": [...]}` where nodes are sorted by id and each is the
    list of its fields in `COLUMNS` order (tuples as lists, missing as null).
    Insertion order therefore does not change the hash; every field does.
    """
    rows = sorted((list(r) for r in map(_ROW, nodes)), key=lambda r: r[0])
    doc = {"v": SCHEMA_VERSION, "meta": [meta.step, meta.next_serial, meta.raw_policy], "nodes": rows}
    try:
        data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError as err:
        raise SnapshotFormatError(f"a node cannot be hashed: {err}") from None
    return hashlib.sha256(data).hexdigest()


def table_content_hash(table: pa.Table) -> str:
    """`content_hash` of a snapshot table (equal to hashing its decoded nodes)."""
    nodes, meta = table_to_nodes(table)
    return content_hash(nodes, meta)
