"""Inputs of `build` and `ask`: a corpus as `Document`s, questions as `AskItem`s (bad input: `InputError`).

A corpus is a folder of .txt/.md files, a JSONL file of documents (one JSON
object per line with `id` and `text`, optionally `path` and `origin`), or a
folder written by `librarian data` (corpus.parquet + questions.parquet).
Questions come from a `librarian data` folder or its questions.parquet, a
JSONL file (`question`, optionally `id`, `answers`, `metric`), a plain text
file (one question per line), or stdin.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from librarian.answering.config import AskItem
from librarian.config import InputError
from librarian.datasets.records import corpus_from_table, questions_from_table, to_documents
from librarian.workspace.folder_io import SECTION_CHARS, scan_folder
from librarian.workspace.nodes import Document


def corpus_kind(source: str | Path) -> str:
    """'dataset' (a `librarian data` folder), 'folder' (text files) or 'jsonl'."""
    path = Path(source)
    if path.is_dir():
        return "dataset" if (path / "corpus.parquet").is_file() else "folder"
    if path.is_file() and path.suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if path.is_file() and path.name == "corpus.parquet":
        return "dataset"
    raise InputError(f"{str(source)!r} is not a folder of .txt/.md files, a .jsonl file of documents, "
                     "or a folder written by `librarian data`")


def _jsonl_rows(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def documents_from_jsonl(path: str | Path) -> list[Document]:
    """One `Document` per line: `id` and `text` required, `path` and `origin` optional."""
    docs = []
    for n, row in enumerate(_jsonl_rows(Path(path)), start=1):
        for key in ("id", "text"):
            if not isinstance(row.get(key), str) or (key == "id" and not row[key]):
                raise InputError(f"{path}: document {n} needs a string {key!r}")
        docs.append(Document(id=row["id"], text=row["text"], path=row.get("path"), origin=row.get("origin")))
    return docs


@dataclass
class LoadedCorpus:
    """A corpus read for a build: its documents, and (for a folder) the files left out and the files split."""

    kind: str
    documents: list[Document]
    skipped: list[Any] = field(default_factory=list)  # folder_io.Skipped
    sections: dict[str, int] = field(default_factory=dict)  # file -> sections it was split into

    def skipped_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.skipped:
            out[s.reason] = out.get(s.reason, 0) + 1
        return out


def load_corpus(source: str | Path, fact_prefix: str = "facts", follow_symlinks: bool = False,
                section_chars: int | None = None) -> LoadedCorpus:
    """The corpus at `source`; a folder's unreadable, binary or unsupported files are listed, not fatal.

    Documents of a `librarian data` bundle without their own path go under
    `fact_prefix/` so the workspace root stays browsable. A folder's files
    longer than `section_chars` become one document per section.
    """
    kind = corpus_kind(source)
    path = Path(source)
    if kind == "folder":
        scan = scan_folder(path, follow_symlinks=follow_symlinks, section_chars=section_chars or SECTION_CHARS)
        corpus = LoadedCorpus(kind, scan.documents, list(scan.skipped), dict(scan.sections))
    else:
        corpus = LoadedCorpus(kind, _documents(kind, path, fact_prefix))
    if not corpus.documents:
        left = f" ({len(corpus.skipped)} file(s) left out: {', '.join(map(str, corpus.skipped[:5]))})" \
            if corpus.skipped else ""
        raise InputError(f"{str(source)!r} holds no documents{left}")
    return corpus


def load_documents(source: str | Path, fact_prefix: str = "facts") -> list[Document]:
    """The corpus at `source` as documents (raw nodes of a new workspace); see `load_corpus`."""
    return load_corpus(source, fact_prefix).documents


def _documents(kind: str, path: Path, fact_prefix: str) -> list[Document]:
    """The documents of a .jsonl file or a `librarian data` bundle."""
    if kind == "jsonl":
        return documents_from_jsonl(path)

    folder = path if path.is_dir() else path.parent
    return [d if d.path else Document(d.id, d.text, f"{fact_prefix}/{d.id}", d.origin, d.metadata)
            for d in to_documents(corpus_from_table(pq.read_table(folder / "corpus.parquet")))]


def _from_bundle(folder: Path, split: str | None) -> list[AskItem]:
    qs = questions_from_table(pq.read_table(folder / "questions.parquet"))
    if split:
        qs = [q for q in qs if q.split == split]
    return [AskItem(q.id, q.question, tuple(q.answers), q.metric, q.split) for q in qs]


def load_questions(source: str | Path | None, split: str | None = None, lines: Iterable[str] | None = None) -> list[AskItem]:
    """Questions from a dataset folder / questions.parquet / .jsonl / text file, or from `lines` (stdin)."""
    if source is None or str(source) == "-":
        raw = list(lines if lines is not None else sys.stdin)
        return _from_text(raw, "stdin")
    path = Path(source)
    if path.is_dir() and (path / "questions.parquet").is_file():
        return _from_bundle(path, split)
    if path.is_file() and path.name.endswith(".parquet"):
        return _from_bundle(path.parent, split)
    if path.is_file() and path.suffix in (".jsonl", ".ndjson"):
        items = []
        for n, row in enumerate(_jsonl_rows(path), start=1):
            q = row.get("question")
            if not isinstance(q, str) or not q.strip():
                raise InputError(f"{path}: line {n} needs a non-empty string 'question'")
            answers = row.get("answers", row.get("answer", []))
            answers = [answers] if isinstance(answers, str) else list(answers)
            items.append(AskItem(str(row.get("id", f"q{n}")), q.strip(), tuple(map(str, answers)),
                                 str(row.get("metric", "squad_f1")), str(row.get("split", ""))))
        return items
    if path.is_file():
        return _from_text(path.read_text(encoding="utf-8").splitlines(), str(path))
    raise InputError(f"{str(source)!r}: no such question file or dataset folder")


def _from_text(raw: list[str], where: str) -> list[AskItem]:
    """Plain lines are questions; a line that is a JSON object is read like a JSONL row."""
    items = []
    for n, line in enumerate(raw, start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}:{n}: not JSON ({exc.msg})") from None
            answers = row.get("answers", [])
            items.append(AskItem(str(row.get("id", f"q{n}")), str(row["question"]),
                                 tuple([answers] if isinstance(answers, str) else answers),
                                 str(row.get("metric", "squad_f1"))))
        else:
            items.append(AskItem(f"q{n}", line))
    if not items:
        raise InputError(f"{where}: no questions")
    return items
