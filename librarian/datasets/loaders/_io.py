"""File reading shared by the benchmark loaders; every failure names the file, the field and the format."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq

from librarian.datasets.records import DatasetError


def need_file(path: Path, fmt: str) -> Path:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found; expected {fmt}")
    return path


def need_dir(path: Path, fmt: str) -> Path:
    if not path.is_dir():
        raise DatasetError(f"{path}: folder not found; expected {fmt}")
    return path


def read_json_list(path: Path, fmt: str) -> list[dict]:
    need_file(path, fmt)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not valid JSON ({e}); expected {fmt}") from e
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise DatasetError(f"{path}: expected a JSON list of objects; expected {fmt}")
    return data


def read_jsonl(path: Path, fmt: str) -> list[dict]:
    need_file(path, fmt)
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}: line {n} is not valid JSON ({e}); expected {fmt}") from e
    return rows


def read_records(path: Path, fmt: str) -> list[dict]:
    """Rows of a .jsonl, .json (a list) or .parquet file."""
    need_file(path, fmt)
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        return read_json_list(path, fmt)
    return read_jsonl(path, fmt)


def read_csv(path: Path, fmt: str, fields: tuple[str, ...]) -> list[dict]:
    need_file(path, fmt)
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in fields if c not in (reader.fieldnames or [])]
        if missing:
            raise DatasetError(f"{path}: missing column(s) {missing}; expected {fmt}")
        return list(reader)


def need(rec: dict, fields: tuple[str, ...], where: str, fmt: str) -> None:
    """Raise naming the first missing field of a record."""
    for f in fields:
        if f not in rec:
            raise DatasetError(f"{where}: missing field {f!r}; expected {fmt}")
