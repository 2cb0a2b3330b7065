"""Where a pipeline's corpus and questions come from: `data.source: kbgym | phantomwiki | path`.

- `kbgym`: a KBGym universe generated in-process (`people`, `seed`);
- `phantomwiki`: the official PhantomWiki generator run into `<work_dir>/phantomwiki`
  with the options here (`seed`, family trees, their size, questions per
  template, question depth; `paper_scale` for paper 001's 16 trees), then
  converted (`phantomwiki.convert`);
- `path`: a folder written by `librarian data ...` (`corpus.parquet`,
  `questions.parquet`), e.g. `librarian data phantomwiki --input RAW --out D`.

`load_source` is the one entry point every pipeline uses; `SourceData` says
which scripted reader and curator suit its questions.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from librarian.datasets.kbgym.build import build_kbgym
from librarian.datasets.phantomwiki import PWConfig, build_phantomwiki
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question, read_parquet

SOURCES = ("kbgym", "phantomwiki", "path")
SPLITS = ("train", "test_in", "test_out", "eval")


@dataclass
class SourceConfig:
    """The dataset a pipeline runs on (`data.*` in a pipeline config)."""

    source: str = "kbgym"  # kbgym | phantomwiki | path
    path: str = ""  # source=path: a `librarian data` output folder
    num_family_trees: int = 2  # phantomwiki generator options
    max_family_tree_size: int = 25
    num_questions_per_type: int = 10
    question_depth: int = 0  # 0: the generator's default (6: eight templates)
    paper_scale: bool = False  # phantomwiki: 16 trees of up to 26 people, 60 questions per template

    def check(self) -> None:
        if self.source not in SOURCES:
            raise DatasetError(f"data.source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        if self.source == "path" and not self.path:
            raise DatasetError("data.source=path needs data.path: a folder written by `librarian data ...`")
        if self.source == "phantomwiki":
            for name in ("num_family_trees", "max_family_tree_size", "num_questions_per_type"):
                if getattr(self, name) < 1:
                    raise DatasetError(f"data.{name} must be >= 1, got {getattr(self, name)}")
            if self.question_depth and self.question_depth < 4:
                raise DatasetError(f"data.question_depth must be 0 (the generator's default) or >= 4, got "
                                   f"{self.question_depth}")


@dataclass
class SourceData:
    """A source's documents and questions (with splits), and what produced them."""

    name: str
    corpus: list[CorpusDoc]
    questions: list[Question]
    config: dict[str, Any] = field(default_factory=dict)
    kbgym: Any = None  # the KBGym object (for gradient groups) when the source is kbgym

    def split(self, name: str) -> list[Question]:
        """The questions of one split, in order."""
        return [q for q in self.questions if q.split == name]

    @property
    def bundle(self) -> Bundle:
        """The documents and questions as a `Bundle` (what KBGym-shaped code reads as `.bundle`)."""
        return Bundle(self.name, self.corpus, self.questions, dict(self.config))

    @property
    def is_phantomwiki(self) -> bool:
        return any(q.metric == "pw_set_f1" for q in self.questions)

    @property
    def scripted_policies(self) -> tuple[str, str]:
        """(reader, curator): the scripted policies that read this source's question grammar."""
        return ("phantom_reader", "phantom_curator") if self.is_phantomwiki else ("kbgym_reader", "kbgym_curator")

    def describe(self) -> str:
        counts = ", ".join(f"{s} {n}" for s, n in _split_counts(self.questions).items())
        return f"{self.name}: {len(self.corpus)} documents, {len(self.questions)} questions ({counts})"


def _split_counts(questions: list[Question]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in questions:
        out[q.split] = out.get(q.split, 0) + 1
    return out


def load_source(data: SourceConfig, people: int = 200, seed: int = 1, work_dir: str | Path | None = None
                ) -> SourceData:
    """The documents and questions `data` names; `people` and `seed` size and seed a generated universe,
    `work_dir` holds the PhantomWiki generator's output (a temporary folder when None)."""
    data.check()
    if data.source == "kbgym":
        kb = build_kbgym(people=people, seed=seed)
        return SourceData("kbgym", kb.corpus, kb.bundle.questions, {"people": people, "seed": seed}, kbgym=kb)
    if data.source == "phantomwiki":
        return _phantomwiki(data, seed, work_dir)
    return _from_path(Path(data.path))


def _phantomwiki(data: SourceConfig, seed: int, work_dir: str | Path | None) -> SourceData:
    cfg = PWConfig.paper_scale(seed) if data.paper_scale else PWConfig(
        data.num_family_trees, data.max_family_tree_size, seed, data.num_questions_per_type)
    if data.question_depth:
        cfg = replace(cfg, question_depth=data.question_depth)
    if work_dir is None:
        with tempfile.TemporaryDirectory(prefix="phantomwiki-") as tmp:
            bundle = build_phantomwiki(tmp, cfg)
    else:
        bundle = build_phantomwiki(Path(work_dir) / "phantomwiki", cfg)
    return SourceData("phantomwiki", bundle.corpus, bundle.questions, {**bundle.config, **asdict(cfg)})


def _from_path(folder: Path) -> SourceData:
    if not folder.is_dir():
        raise DatasetError(f"data.path {str(folder)!r}: no such folder; expected one written by `librarian data`")
    bundle: Bundle = read_parquet(folder)
    if not bundle.questions:
        raise DatasetError(f"data.path {str(folder)!r}: questions.parquet holds no questions")
    return SourceData(f"path:{folder}", bundle.corpus, bundle.questions, {"path": str(folder)})


def require_splits(data: SourceData, needed: list[str] | tuple[str, ...]) -> None:
    """Raise a `DatasetError` naming the splits a pipeline needs that the source lacks."""
    have = _split_counts(data.questions)
    missing = [s for s in needed if not have.get(s)]
    if missing:
        raise DatasetError(f"{data.name}: no questions in split(s) {missing}; it has {have or 'none'}")


def load_documents_and_questions(data: SourceConfig, people: int = 200, seed: int = 1,
                                 work_dir: str | Path | None = None) -> tuple[list[CorpusDoc], list[Question]]:
    """The corpus documents and questions (splits set) of a source: the one call another pipeline needs."""
    src = load_source(data, people, seed, work_dir)
    return src.corpus, src.questions
