"""The trace: every applied op, in order; enough to rebuild any state without a model."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from librarian.workspace.dedup import DedupVerdict
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError

if TYPE_CHECKING:
    from librarian.workspace.store import Workspace

TRACE_SCHEMA_VERSION = "1"
_STR_LIST = pa.list_(pa.string())
TRACE_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("op", pa.string(), nullable=False),  # the op's JSON payload
        pa.field("verdicts", pa.string(), nullable=False),  # JSON list of near-duplicate verdicts
        pa.field("created", _STR_LIST),
        pa.field("changed", _STR_LIST),
        pa.field("deleted", _STR_LIST),
    ],
    metadata={"librarian.kind": "trace", "librarian.schema_version": TRACE_SCHEMA_VERSION},
)


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One applied op: its payload, the dedup verdicts it used, and what it touched."""

    step: int
    op: dict[str, Any]
    verdicts: tuple[DedupVerdict, ...]
    created: tuple[str, ...]
    changed: tuple[str, ...]
    deleted: tuple[str, ...]


def trace_to_table(entries: Iterable[TraceEntry]) -> pa.Table:
    """The trace as an Arrow table (schema `TRACE_SCHEMA`)."""
    rows = list(entries)
    return pa.table(
        {
            "step": [e.step for e in rows],
            "op": [json.dumps(e.op, ensure_ascii=False, sort_keys=True) for e in rows],
            "verdicts": [json.dumps([v.to_dict() for v in e.verdicts]) for e in rows],
            "created": [list(e.created) for e in rows],
            "changed": [list(e.changed) for e in rows],
            "deleted": [list(e.deleted) for e in rows],
        },
        schema=TRACE_SCHEMA,
    )


def trace_from_table(table: pa.Table, source: str = "trace") -> list[TraceEntry]:
    """Entries from an Arrow table; a wrong schema raises `SnapshotFormatError` naming `source`."""
    meta = table.schema.metadata or {}
    version = meta.get(b"librarian.schema_version", b"").decode()
    if meta.get(b"librarian.kind") != b"trace":
        raise SnapshotFormatError(f"{source}: not a librarian trace (no 'librarian.kind: trace' in the schema metadata)")
    if version != TRACE_SCHEMA_VERSION:
        raise SnapshotFormatError(f"{source}: trace schema version {version!r} is not supported (expected {TRACE_SCHEMA_VERSION})")
    missing = [n for n in TRACE_SCHEMA.names if n not in table.column_names]
    if missing:
        raise SnapshotFormatError(f"{source}: trace is missing column(s) {', '.join(missing)}")
    cols = {n: table.column(n).to_pylist() for n in TRACE_SCHEMA.names}
    entries = []
    for i in range(table.num_rows):
        try:
            op = json.loads(cols["op"][i])
            verdicts = tuple(DedupVerdict.from_dict(v) for v in json.loads(cols["verdicts"][i]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotFormatError(f"{source}: row {i} is corrupt ({exc})") from None
        entries.append(TraceEntry(cols["step"][i], op, verdicts, tuple(cols["created"][i] or ()),
                                  tuple(cols["changed"][i] or ()), tuple(cols["deleted"][i] or ())))
    return entries


def write_trace(entries: Iterable[TraceEntry], path: str | Path) -> None:
    """Write a trace as Parquet, atomically (a temporary file renamed into place; removed on failure).

    An entry the format cannot hold raises `SnapshotFormatError` and nothing is written.
    """
    path = Path(path)
    try:
        table = trace_to_table(entries)
    except (UnicodeEncodeError, pa.ArrowException) as exc:
        raise SnapshotFormatError(f"{path}: a trace entry cannot be encoded ({exc})") from None
    tmp = path.with_name(path.name + ".tmp")
    try:
        pq.write_table(table, tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_trace(path: str | Path) -> list[TraceEntry]:
    """Read a Parquet trace; a corrupt file raises `SnapshotFormatError` naming it."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise SnapshotFormatError(f"{path}: cannot read trace ({exc})") from None
    return trace_from_table(table, str(path))


def replay(initial: Workspace, entries: Iterable[TraceEntry]) -> Workspace:
    """Apply a trace to a copy of `initial`, reusing recorded dedup verdicts; no model is called."""
    ws = initial.copy()
    ws.guard = None
    for entry in entries:
        try:
            result = ws.apply_payload(entry.op, verdicts=entry.verdicts)
        except WorkspaceError as exc:
            raise WorkspaceError(f"replay failed at step {entry.step}: {exc}") from None
        if result.step != entry.step:
            raise WorkspaceError(f"replay reached step {result.step} where the trace says {entry.step}; "
                                 "the trace does not start from this initial state")
    ws.guard = initial.guard
    return ws
