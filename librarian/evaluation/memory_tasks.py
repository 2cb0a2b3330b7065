"""Memory tasks for the researcher evaluation: one session history and the questions asked of it.

A `MemoryTask` is what one memory store is built from: its sessions (raw
documents) and the questions whose gold `support` are session ids of the
same task. Tasks come from a generated Memory-Gym history or from a loaded
benchmark `Bundle`, grouped the way the dataset defines a store (its
`collection`): LoCoMo one per conversation, LongMemEval one per question's
haystack, HotpotQA one per question (or one shared store), NarrativeQA one
per story.

Session ids become workspace-safe local ids: the `<collection>/` prefix the
loaders add is dropped and any other '/' becomes '_' (the original id stays
in `Document.metadata["source_id"]`); question supports are mapped alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from librarian.datasets.loaders import load_hotpotqa, load_locomo, load_longmemeval, load_narrativeqa
from librarian.datasets.memorygym import MemoryGymConfig, build_memorygym
from librarian.datasets.records import Bundle, DatasetError, Question, read_parquet, to_documents
from librarian.workspace.nodes import Document

KINDS: tuple[str, ...] = ("memorygym", "locomo", "longmemeval", "hotpotqa", "narrativeqa")


@dataclass(frozen=True, slots=True)
class MemoryTask:
    """One history (`sessions`, raw documents) and the questions about it (`support` = session ids)."""

    name: str
    sessions: tuple[Document, ...]
    questions: tuple[Question, ...]

    def __post_init__(self) -> None:
        ids = [s.id for s in self.sessions]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise DatasetError(f"task {self.name!r}: session ids appear twice: {', '.join(dup[:5])}")
        known = set(ids)
        for q in self.questions:
            missing = [s for s in q.support if s not in known]
            if missing:
                raise DatasetError(f"task {self.name!r} question {q.id!r}: support {', '.join(missing[:5])} "
                                   f"is not among the task's {len(ids)} sessions")


def local_id(doc_id: str, collection: str) -> str:
    """A session id without its `<collection>/` prefix and with no '/' (so it is one path name)."""
    short = doc_id[len(collection) + 1:] if doc_id.startswith(collection + "/") else doc_id
    short = short.replace("/", "_").strip()
    return short if short not in ("", ".", "..") else f"doc_{short or 'empty'}".replace(".", "_")


def memorygym_task(cfg: MemoryGymConfig, split: str | None = None) -> MemoryTask:
    """The generated Memory-Gym history of `cfg` and its instances (only `split`'s when given)."""
    return _only_task(tasks_from_bundle(build_memorygym(cfg), "memorygym", split=split), "memorygym")


def _only_task(tasks: list[MemoryTask], name: str) -> MemoryTask:
    if len(tasks) != 1:
        raise DatasetError(f"{name}: expected one history, got {len(tasks)}")
    return tasks[0]


def tasks_from_bundle(bundle: Bundle, name: str, split: str | None = None) -> list[MemoryTask]:
    """One task per collection of `bundle` (its sessions and questions), in first-seen order.

    `split` keeps only that split's questions; a collection left with no
    questions is dropped. A question whose collection has no documents, or
    whose support is not among them, is an error naming it.
    """
    sessions: dict[str, list[Document]] = {}
    for doc in to_documents(bundle.corpus):
        coll = doc.metadata["collection"]
        sessions.setdefault(coll, []).append(
            replace(doc, id=local_id(doc.id, coll), path=None, metadata={**doc.metadata, "source_id": doc.id}))
    questions: dict[str, list[Question]] = {}
    for q in bundle.questions:
        if split is not None and q.split != split:
            continue
        if q.collection not in sessions:
            raise DatasetError(f"{name}: question {q.id!r} belongs to collection {q.collection!r}, which has no "
                               "documents in the corpus")
        support = [local_id(s, q.collection) for s in q.support]
        questions.setdefault(q.collection, []).append(replace(q, support=support))
    if split is not None and not questions:
        raise DatasetError(f"{name}: no question has split {split!r}; splits present: "
                           f"{', '.join(bundle.splits()) or 'none'}")
    return [MemoryTask(name if coll == name else f"{name}/{coll}", tuple(sessions[coll]), tuple(qs))
            for coll, qs in questions.items()]


def _memorygym(path: Path) -> Bundle:
    return read_parquet(path, "memorygym")


_LOADERS: dict[str, Callable[[Path], Bundle]] = {
    "memorygym": _memorygym,  # a folder written by `librarian data memorygym --out DIR`
    "locomo": load_locomo,
    "longmemeval": load_longmemeval,
    "hotpotqa": load_hotpotqa,
    "narrativeqa": load_narrativeqa,
}


def load_memory_tasks(kind: str, path: str | Path, split: str | None = None) -> list[MemoryTask]:
    """The tasks of a benchmark file (or folder) of `kind`; see KINDS. Unknown kinds and missing paths are errors."""
    if kind not in _LOADERS:
        raise ValueError(f"unknown memory task kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{kind}: {path} does not exist")
    return tasks_from_bundle(_LOADERS[kind](path), kind, split=split)
