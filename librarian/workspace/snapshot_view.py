"""A read-only `NodeSource` over an Arrow snapshot table, for rollout and probe workers.

The view keeps the table's columns as they arrive (zero-copy over IPC bytes)
and builds what a lookup needs only when the first such lookup comes: an
id -> row index, a path -> row index, and parent path -> child rows. A `Node`
is materialised only for the rows a caller asks for. Tombstones stay in the
table but are invisible through the `NodeSource` methods.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from librarian.workspace import codec
from librarian.workspace.nodes import Node, SnapshotMeta

_BATCH = 4096
_LIST_COLUMNS = codec.LIST_COLUMNS


class SnapshotView:
    """Read-only access to a snapshot table: `get`, `by_path`, `children`, iteration.

    Build one with `from_ipc_bytes`, `from_table`, `from_parquet`,
    `from_ipc_file` or `from_nodes`. All of them validate the schema and
    raise `SnapshotFormatError` on a bad snapshot.
    """

    def __init__(self, table: pa.Table, meta: SnapshotMeta) -> None:
        """Wrap an already validated table (use the `from_*` constructors instead)."""
        if table.num_rows and any(col.num_chunks > 1 for col in table.columns):
            table = table.combine_chunks()
        self._table = table
        self._meta = meta
        self._cols: list[pa.Array] | None = None
        self._active_rows: list[int] | None = None
        self._ids: list[str] | None = None
        self._paths: list[str] | None = None
        self._id_index: dict[str, int] | None = None
        self._path_index: dict[str, int] | None = None
        self._child_rows: dict[str, tuple[int, int]] | None = None
        self._child_order: np.ndarray = np.zeros(0, np.int64)

    # --- constructors ------------------------------------------------------------

    @classmethod
    def from_table(cls, table: pa.Table, source: str | None = None) -> SnapshotView:
        """A view over a snapshot table (validated; no copy when it is already canonical)."""
        table, meta = codec.validate_table(table, source)
        return cls(table, meta)

    @classmethod
    def from_ipc_bytes(cls, data: bytes | pa.Buffer) -> SnapshotView:
        """A view over Arrow IPC stream bytes; the columns reference `data` without copying."""
        table = codec.table_from_ipc_bytes(data, "IPC bytes")
        return cls(table, codec.meta_from_schema(table.schema))

    @classmethod
    def from_parquet(cls, path: str | os.PathLike[str]) -> SnapshotView:
        """A view over a snapshot Parquet file."""
        table = codec.read_parquet_table(path)
        return cls(table, codec.meta_from_schema(table.schema))

    @classmethod
    def from_ipc_file(cls, path: str | os.PathLike[str]) -> SnapshotView:
        """A view over an Arrow IPC snapshot file (memory-mapped)."""
        table = codec.read_ipc_table(path)
        return cls(table, codec.meta_from_schema(table.schema))

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], meta: SnapshotMeta) -> SnapshotView:
        """A view over nodes encoded in this process (tests, local tools)."""
        return cls(codec.nodes_to_table(nodes, meta), meta)

    # --- the snapshot ---------------------------------------------------------------

    @property
    def table(self) -> pa.Table:
        """The underlying snapshot table (tombstones included)."""
        return self._table

    @property
    def meta(self) -> SnapshotMeta:
        """The snapshot's `SnapshotMeta`."""
        return self._meta

    def to_ipc_bytes(self) -> bytes:
        """The snapshot as Arrow IPC stream bytes."""
        return codec.table_to_ipc_bytes(self._table)

    # --- lazily built structures -----------------------------------------------------

    def _columns(self) -> list[pa.Array]:
        if self._cols is None:
            self._cols = [
                col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks) for col in self._table.columns
            ]
        return self._cols

    def _active(self) -> list[int]:
        if self._active_rows is None:
            deleted = self._table.column("deleted_step")
            if deleted.null_count == self._table.num_rows:
                self._active_rows = list(range(self._table.num_rows))
            else:
                mask = pc.is_null(deleted)
                self._active_rows = pc.indices_nonzero(mask).to_pylist()
        return self._active_rows

    def _all_active(self) -> bool:
        return len(self._active()) == self._table.num_rows

    def _id_map(self) -> dict[str, int]:
        if self._id_index is None:
            if self._ids is None:
                self._ids = self._table.column("id").to_pylist()
            ids = self._ids
            rows = self._active()
            if self._all_active():
                self._id_index = dict(zip(ids, rows, strict=True))
            else:
                self._id_index = {ids[r]: r for r in rows}
        return self._id_index

    def _path_list(self) -> list[str]:
        if self._paths is None:
            self._paths = self._table.column("path").to_pylist()
        return self._paths

    def _path_map(self) -> dict[str, int]:
        if self._path_index is None:
            paths = self._path_list()
            rows = self._active()
            if self._all_active():
                self._path_index = dict(zip(paths, rows, strict=True))
            else:
                self._path_index = {paths[r]: r for r in rows}
        return self._path_index

    def _children_map(self) -> dict[str, tuple[int, int]]:
        """parent path -> (start, stop) in `_child_order`, which lists active rows by (parent, path).

        Built column-wise: parents come from one vectorised split, one sort
        groups rows by parent (sorted by path within a group), and only the
        distinct parents reach Python.
        """
        if self._child_rows is None:
            paths = self._columns()[1]
            active = None if self._all_active() else pa.array(self._active(), pa.int64())
            if active is not None:
                paths = paths.take(active)
            parts = pc.split_pattern(paths, "/", max_splits=1, reverse=True)
            parents = pc.if_else(pc.equal(pc.list_value_length(parts), 2), pc.list_element(parts, 0), "")
            order = pc.sort_indices(pa.table({"parent": parents, "path": paths}),
                                    sort_keys=[("parent", "ascending"), ("path", "ascending")])
            grouped = parents.take(order).dictionary_encode()
            codes = grouped.indices.to_numpy(zero_copy_only=False)
            names = grouped.dictionary.to_pylist()
            starts = np.flatnonzero(np.diff(codes)) + 1
            bounds = np.concatenate(([0], starts, [len(codes)])) if len(codes) else np.zeros(1, np.int64)
            rows = order.to_numpy()
            self._child_order = rows if active is None else active.to_numpy()[rows]
            self._child_rows = {
                names[codes[b]]: (int(b), int(e)) for b, e in zip(bounds[:-1], bounds[1:], strict=True)
            }
        return self._child_rows

    def _child_row_list(self, path: str) -> list[int]:
        start, stop = self._children_map().get(path, (0, 0))
        return self._child_order[start:stop].tolist()

    # --- materialising rows ------------------------------------------------------------

    def node_at(self, row: int) -> Node:
        """The node (active or not) stored in `row`."""
        values = [col[row].as_py() for col in self._columns()]
        for i in _LIST_COLUMNS:
            values[i] = tuple(values[i])
        return Node(*values)

    def nodes_at(self, rows: Sequence[int]) -> list[Node]:
        """The nodes stored in `rows`, in that order (one columnar take for many rows)."""
        if len(rows) <= 16:
            return [self.node_at(r) for r in rows]
        taken = self._table.take(pa.array(rows, pa.int64()))
        return codec.decode_rows(taken)

    # --- NodeSource ------------------------------------------------------------------------

    def get(self, node_id: str) -> Node | None:
        """The active node with this id, or None."""
        row = self._id_map().get(node_id)
        return None if row is None else self.node_at(row)

    def by_path(self, path: str) -> Node | None:
        """The active node at this (normalised) path, or None."""
        row = self._path_map().get(path)
        return None if row is None else self.node_at(row)

    def children(self, path: str) -> list[Node]:
        """Active nodes whose parent path is `path` ('' is the root), sorted by path."""
        return self.nodes_at(self._child_row_list(path))

    def child_count(self, path: str) -> int:
        """How many active nodes lie directly under `path` (no node is materialised)."""
        start, stop = self._children_map().get(path, (0, 0))
        return stop - start

    def __iter__(self) -> Iterator[Node]:
        """All active nodes, in row order (decoded a batch at a time)."""
        table = self._table
        if self._all_active():
            for start in range(0, table.num_rows, _BATCH):
                yield from codec.decode_rows(table.slice(start, _BATCH))
        else:
            rows = self._active()
            for start in range(0, len(rows), _BATCH):
                yield from self.nodes_at(rows[start : start + _BATCH])

    def __len__(self) -> int:
        """The number of active nodes."""
        return len(self._active())

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, str) and node_id in self._id_map()

    def all_nodes(self) -> list[Node]:
        """Every node, tombstones included, in row order."""
        return codec.decode_rows(self._table)

    def __repr__(self) -> str:
        return f"SnapshotView({len(self)} active of {self._table.num_rows} nodes, step={self._meta.step})"

