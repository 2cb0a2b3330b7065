"""An append-only Parquet log: a folder of part files, each written whole and renamed into place.

Parquet files cannot be appended to, so a log is a folder (a Parquet
dataset): every `append` writes one new part file to a temporary name and
renames it, so a reader sees a part completely or not at all and a crash
loses nothing already appended. Parts sort by name in the order they were
written. Every row has a unique `key` column; `read` keeps the first row per
key, so `compact` (which merges parts into one, then deletes them) is safe
to run while others read or append.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

PART_GLOB = "part-*.parquet"


class LogFormatError(ValueError):
    """A part file that is not this log's (another schema, not Parquet); the message names it."""


class PartLog:
    """Rows of one schema in `folder`, appended atomically; `key` names the column unique per row."""

    def __init__(self, folder: str | os.PathLike[str], schema: pa.Schema, key: str) -> None:
        if key not in schema.names:
            raise ValueError(f"key column {key!r} is not in the schema ({', '.join(schema.names)})")
        self.folder = Path(folder)
        self.schema = schema
        self.key = key
        self._lock = threading.Lock()  # one compaction at a time in this process
        self._seen_parts: set[str] = set()  # parts whose rows `read_new` has (read or written here)
        self._seen_keys: set[Any] = set()
        self._new: list[dict[str, Any]] = []  # rows known here that `read_new` has not returned yet

    def append(self, rows: Sequence[dict[str, Any]]) -> Path | None:
        """Write `rows` as one new part (nothing for no rows); returns its path.

        A row that does not fit the schema raises `LogFormatError` and nothing is written.
        """
        if not rows:
            return None
        try:
            table = pa.Table.from_pylist(list(rows), schema=self.schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise LogFormatError(f"{self.folder}: a row does not fit the log's schema ({exc})") from None
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._write(table, self._new_name())
        with self._lock:  # this object need not read its own part back
            self._seen_parts.add(path.name)
            self._take(list(rows))
        return path

    def _take(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row[self.key] not in self._seen_keys:
                self._seen_keys.add(row[self.key])
                self._new.append(row)

    def _new_name(self, after: str | None = None) -> str:
        if after is not None:  # a compacted part sorts just before the last part it merged
            return after.removesuffix(".parquet") + ".c.parquet"
        return f"part-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"

    def _write(self, table: pa.Table, name: str) -> Path:
        path = self.folder / name
        tmp = self.folder / f".{name}.tmp"
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    def parts(self) -> list[Path]:
        """The part files, oldest first."""
        return sorted(self.folder.glob(PART_GLOB)) if self.folder.is_dir() else []

    def read(self) -> pa.Table:
        """Every row, oldest first, one per key."""
        tables = [self._read_part(p) for p in self.parts()]
        tables = [t for t in tables if t is not None]
        if not tables:
            return self.schema.empty_table()
        table = pa.concat_tables(tables)
        seen: set[Any] = set()
        keep = []
        for i, key in enumerate(table.column(self.key).to_pylist()):
            if key not in seen:
                seen.add(key)
                keep.append(i)
        return table if len(keep) == table.num_rows else table.take(keep)

    def rows(self) -> list[dict[str, Any]]:
        return self.read().to_pylist()

    def read_new(self) -> list[dict[str, Any]]:
        """The rows this object has not returned before (parts read once; a compacted part's rows are known)."""
        with self._lock:
            for path in self.parts():
                if path.name not in self._seen_parts:
                    table = self._read_part(path)
                    self._seen_parts.add(path.name)
                    self._take([] if table is None else table.to_pylist())
            out, self._new = self._new, []
            return out

    def _read_part(self, path: Path) -> pa.Table | None:
        try:
            table = pq.read_table(path)
        except FileNotFoundError:  # compacted away since it was listed: its rows are in the merged part
            return None
        except (OSError, pa.ArrowException) as exc:
            raise LogFormatError(f"{path}: not a readable Parquet part ({exc})") from None
        missing = [n for n in self.schema.names if n not in table.column_names]
        if missing:
            raise LogFormatError(f"{path}: missing column(s) {', '.join(missing)}; not a part of this log")
        try:
            return table.select(self.schema.names).cast(self.schema)
        except (pa.ArrowException, ValueError) as exc:
            raise LogFormatError(f"{path}: columns of the wrong type ({exc})") from None

    def compact(self, min_parts: int = 2) -> int:
        """Merge every part into one when there are at least `min_parts`; returns how many were merged."""
        with self._lock:
            parts = self.parts()
            if len(parts) < max(min_parts, 2):
                return 0
            tables = [(p, self._read_part(p)) for p in parts]
            for path, table in tables:
                if path.name not in self._seen_parts and table is not None:
                    self._take(table.to_pylist())
            merged = self._write(pa.concat_tables([t for _, t in tables if t is not None]),
                                 self._new_name(after=parts[-1].name))
            self._seen_parts.add(merged.name)
            for path in parts:  # the merged part already holds their rows: a reader now sees each row once
                path.unlink(missing_ok=True)
            return len(parts)
