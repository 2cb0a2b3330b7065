"""The records every dataset produces: corpus documents and questions, their Arrow schemas.

A dataset is a `Bundle`: a corpus (the documents a store starts from) and a
question set (with gold answers, supports and splits). Both round-trip through
Arrow tables and Parquet files whose schema carries `SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from librarian.workspace.nodes import Document

SCHEMA_VERSION = "1"

# How a question's `answers` are graded (see librarian.datasets.scoring):
#   set_f1     answers are the complete set; elements SQuAD-normalised (KBGym)
#   pw_set_f1  answers are the complete set; PhantomWiki normalisation (strip, lower)
#   squad_f1   answers are alternatives; best SQuAD token F1 (HotpotQA, NarrativeQA)
#   locomo_f1  LoCoMo's per-category token F1 (stemmed)
#   judge      an LLM judge compares a response with the reference answer
METRICS: tuple[str, ...] = ("set_f1", "pw_set_f1", "squad_f1", "locomo_f1", "judge")


class DatasetError(ValueError):
    """A dataset file, field or option was missing or malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class CorpusDoc:
    """One document of a corpus.

    `origin` names the original fact, article sentence or session the document
    states; `source` names where it came from (an article title, a session id,
    a file); `collection` groups documents that form one store (a KBGym
    universe, one LoCoMo conversation, one BRIGHT domain).
    """

    id: str
    text: str
    origin: str
    collection: str
    source: str = ""
    title: str = ""
    path: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Question:
    """One question with its gold answers.

    `answers` is a set (metric `set_f1`/`pw_set_f1`) or a list of alternatives
    (`squad_f1`, `locomo_f1`, `judge`); `support` are the ids of the corpus
    documents that hold the evidence; `keys` the typed names it mentions
    ("person:Ada Moss", "city:Port Avel", "relation:mother"); `docs` the ids of
    the question's own document set where it has one (BrowseComp-Plus,
    LongMemEval haystacks); `extra` dataset-specific fields as strings.
    """

    id: str
    question: str
    answers: list[str]
    split: str
    qclass: str
    template: str
    collection: str
    metric: str = "squad_f1"
    support: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    docs: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise DatasetError(f"question {self.id}: unknown metric {self.metric!r}; expected one of {METRICS}")


@dataclass(slots=True)
class Bundle:
    """A corpus and its questions, plus the configuration that produced them."""

    name: str
    corpus: list[CorpusDoc]
    questions: list[Question]
    config: dict[str, object] = field(default_factory=dict)

    def split(self, name: str) -> list[Question]:
        """The questions of one split, in order."""
        return [q for q in self.questions if q.split == name]

    def splits(self) -> dict[str, int]:
        """Question counts per split, in first-seen order."""
        out: dict[str, int] = {}
        for q in self.questions:
            out[q.split] = out.get(q.split, 0) + 1
        return out


_STR_MAP = pa.map_(pa.string(), pa.string())
_STR_LIST = pa.list_(pa.string())

CORPUS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("text", pa.string()),
        ("origin", pa.string()),
        ("collection", pa.string()),
        ("source", pa.string()),
        ("title", pa.string()),
        ("path", pa.string()),
        ("extra", _STR_MAP),
    ],
    metadata={"librarian.schema": "corpus", "librarian.schema_version": SCHEMA_VERSION},
)

QUESTION_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("answers", _STR_LIST),
        ("split", pa.string()),
        ("qclass", pa.string()),
        ("template", pa.string()),
        ("collection", pa.string()),
        ("metric", pa.string()),
        ("support", _STR_LIST),
        ("keys", _STR_LIST),
        ("docs", _STR_LIST),
        ("extra", _STR_MAP),
    ],
    metadata={"librarian.schema": "questions", "librarian.schema_version": SCHEMA_VERSION},
)


def _sorted_items(d: dict[str, str]) -> list[tuple[str, str]]:
    return sorted((str(k), str(v)) for k, v in d.items())


def corpus_table(docs: Iterable[CorpusDoc]) -> pa.Table:
    """Corpus documents as an Arrow table with `CORPUS_SCHEMA`."""
    rows = [
        {
            "id": d.id,
            "text": d.text,
            "origin": d.origin,
            "collection": d.collection,
            "source": d.source,
            "title": d.title,
            "path": d.path,
            "extra": _sorted_items(d.extra),
        }
        for d in docs
    ]
    return pa.Table.from_pylist(rows, schema=CORPUS_SCHEMA)


def question_table(questions: Iterable[Question]) -> pa.Table:
    """Questions as an Arrow table with `QUESTION_SCHEMA`."""
    rows = [
        {
            "id": q.id,
            "question": q.question,
            "answers": list(q.answers),
            "split": q.split,
            "qclass": q.qclass,
            "template": q.template,
            "collection": q.collection,
            "metric": q.metric,
            "support": list(q.support),
            "keys": list(q.keys),
            "docs": list(q.docs),
            "extra": _sorted_items(q.extra),
        }
        for q in questions
    ]
    return pa.Table.from_pylist(rows, schema=QUESTION_SCHEMA)


def _check_schema(table: pa.Table, expected: pa.Schema, what: str) -> None:
    meta = table.schema.metadata or {}
    version = meta.get(b"librarian.schema_version", b"?").decode()
    if version != SCHEMA_VERSION:
        raise DatasetError(f"{what}: schema version {version!r}, expected {SCHEMA_VERSION!r}")
    missing = [f.name for f in expected if f.name not in table.schema.names]
    if missing:
        raise DatasetError(f"{what}: missing columns {missing}")


def corpus_from_table(table: pa.Table) -> list[CorpusDoc]:
    """Corpus documents back from an Arrow table written by `corpus_table`."""
    _check_schema(table, CORPUS_SCHEMA, "corpus table")
    return [
        CorpusDoc(
            id=r["id"],
            text=r["text"],
            origin=r["origin"],
            collection=r["collection"],
            source=r["source"],
            title=r["title"],
            path=r["path"],
            extra=dict(r["extra"] or []),
        )
        for r in table.to_pylist()
    ]


def questions_from_table(table: pa.Table) -> list[Question]:
    """Questions back from an Arrow table written by `question_table`."""
    _check_schema(table, QUESTION_SCHEMA, "question table")
    return [
        Question(
            id=r["id"],
            question=r["question"],
            answers=list(r["answers"]),
            split=r["split"],
            qclass=r["qclass"],
            template=r["template"],
            collection=r["collection"],
            metric=r["metric"],
            support=list(r["support"]),
            keys=list(r["keys"]),
            docs=list(r["docs"]),
            extra=dict(r["extra"] or []),
        )
        for r in table.to_pylist()
    ]


def write_parquet(bundle: Bundle, out_dir: str | Path) -> dict[str, Path]:
    """Write `corpus.parquet` and `questions.parquet` into `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"corpus": out / "corpus.parquet", "questions": out / "questions.parquet"}
    pq.write_table(corpus_table(bundle.corpus), paths["corpus"])
    pq.write_table(question_table(bundle.questions), paths["questions"])
    return paths


def read_parquet(in_dir: str | Path, name: str = "") -> Bundle:
    """Read a bundle written by `write_parquet`."""
    src = Path(in_dir)
    for f in ("corpus.parquet", "questions.parquet"):
        if not (src / f).is_file():
            raise DatasetError(f"{src / f}: not found; expected a folder written by `librarian data`")
    corpus = corpus_from_table(pq.read_table(src / "corpus.parquet"))
    questions = questions_from_table(pq.read_table(src / "questions.parquet"))
    return Bundle(name=name or src.name, corpus=corpus, questions=questions)


def to_documents(corpus: Sequence[CorpusDoc], collection: str | None = None) -> list[Document]:
    """Corpus documents as workspace `Document`s (raw nodes of a new store).

    `origin` carries over; `source`, `title`, `collection` and `extra` go to the
    metadata so provenance (an article, a session) stays with the node.
    `collection` keeps only the documents of one collection.
    """
    out = []
    for d in corpus:
        if collection is not None and d.collection != collection:
            continue
        meta = {"collection": d.collection, "source": d.source, "title": d.title}
        meta.update(d.extra)
        out.append(Document(id=d.id, text=d.text, path=d.path, origin=d.origin, metadata=meta))
    return out


def flat_documents(corpus: Sequence[CorpusDoc]) -> list[Document]:
    """The flat store's nodes: every corpus document at `facts/<id>` (what the pipelines start a store from)."""
    return [replace(d, path=f"facts/{d.id}") for d in to_documents(corpus)]


def dumps_json(obj: object) -> str:
    """Compact, key-sorted JSON (for string fields inside `extra`)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
