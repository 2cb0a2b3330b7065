"""The official PhantomWiki arm: run the real generator (phantom-wiki 1.0.3) and convert its output.

Articles become a store of atomic documents, one per fact
(`phantomwiki_articles`), each naming its article and sentence. Questions
keep PhantomWiki's list answers, template, type, difficulty and aggregation
flag, get typed keys from their Prolog query (aggregations included), and
are all placed in the KBGym split scheme with two reserved templates for
test_out, split sizes in proportion to the question count. Grading is
PhantomWiki's set-based precision/recall/F1 (`pw_set_f1`). PhantomWiki's
relations carry no per-fact supports, so `support` is empty.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from librarian.datasets.phantomwiki_articles import COLLECTION, article_documents
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question, dumps_json
from librarian.datasets.splits import Sizes, assign_proportional

# attribute predicates and the key type each value gets (others are relations between people)
ATTRIBUTE_KEYS = {"dob": "date", "job": "job", "hobby": "hobby", "gender": "gender", "occupation": "job",
                  "age": "age"}
META_PREDICATES = {"aggregate_all", "count", "distinct", "findall", "setof", "bagof", "length", "sort", "member"}
_CALL = re.compile(r"(\w+)\(([^()]*)\)")


@dataclass(frozen=True, slots=True)
class PWConfig:
    """Generator options (the small seeded default runs in about 2 s); `question_depth` None: the
    generator's own default (6, eight templates)."""

    num_family_trees: int = 2
    max_family_tree_size: int = 25
    seed: int = 1
    num_questions_per_type: int = 10
    question_depth: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_family_trees", "max_family_tree_size", "num_questions_per_type"):
            if getattr(self, name) < 1:
                raise DatasetError(f"phantomwiki: {name} must be >= 1, got {getattr(self, name)}")
        if self.question_depth is not None and self.question_depth < 4:
            raise DatasetError(f"phantomwiki: question_depth must be >= 4 (the grammar's least depth), "
                               f"got {self.question_depth}")

    @classmethod
    def paper_scale(cls, seed: int = 1) -> PWConfig:
        """Paper 001's arm: 16 family trees, 480 questions over 8 templates."""
        return cls(num_family_trees=16, max_family_tree_size=26, seed=seed, num_questions_per_type=60)


def generate(out_dir: str | Path, cfg: PWConfig, timeout_s: float = 1800) -> Path:
    """Run `python -m phantom_wiki` into `out_dir`; returns the folder with articles and questions."""
    out = Path(out_dir)
    if shutil.which("swipl") is None:
        raise DatasetError("PhantomWiki needs SWI-Prolog (`swipl`); run `make system-deps` "
                           "(Debian package swi-prolog-nox)")
    cmd = [
        sys.executable, "-m", "phantom_wiki", "-od", str(out),
        "--num-family-trees", str(cfg.num_family_trees),
        "--max-family-tree-size", str(cfg.max_family_tree_size),
        "--num-questions-per-type", str(cfg.num_questions_per_type),
        "--seed", str(cfg.seed), "--article-format", "json", "--question-format", "json", "--quiet",
    ]
    if cfg.question_depth is not None:
        cmd += ["--question-depth", str(cfg.question_depth)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout)[-1500:]
        if "No module named phantom_wiki" in tail:
            raise DatasetError("the phantom-wiki package is not installed; run `make setup` "
                               "(pip install --ignore-requires-python phantom-wiki==1.0.3)")
        raise DatasetError(f"phantom_wiki exited with {proc.returncode}:\n{tail}")
    return out


def _load_json(path: Path, what: str) -> list:
    if not path.is_file():
        raise DatasetError(f"{path}: not found; expected PhantomWiki's {what} (generated with "
                           "--article-format json --question-format json)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of {what}")
    return data


def _need(rec: dict, fields: tuple[str, ...], path: Path, i: int) -> None:
    for f in fields:
        if f not in rec:
            raise DatasetError(f"{path}: record {i} lacks field {f!r} (expected fields {list(fields)})")


def article_docs(raw_dir: Path) -> list[CorpusDoc]:
    """One atomic document per fact of every article (`phantomwiki_articles.article_documents`)."""
    path = raw_dir / "articles.json"
    docs: list[CorpusDoc] = []
    for i, art in enumerate(_load_json(path, "articles")):
        _need(art, ("title", "article"), path, i)
        docs += article_documents(art, path, i, start=len(docs))
    return docs


def query_keys(prolog_query: list[str]) -> list[str]:
    """The typed keys of a Prolog query: `person:` names, `relation:` predicates and attribute values
    (`date:`, `job:`, `hobby:`), including those inside `aggregate_all(count, distinct(...), C)`."""
    keys: list[str] = []
    for atom in prolog_query:
        for pred, args in _CALL.findall(atom):
            if pred in META_PREDICATES:
                continue
            quoted = re.findall(r'"([^"]*)"', args)
            if pred in ATTRIBUTE_KEYS:
                keys += [f"{ATTRIBUTE_KEYS[pred]}:{v}" for v in quoted]
            else:
                keys.append(f"relation:{pred}")
                keys += [f"person:{v}" for v in quoted]
    return list(dict.fromkeys(keys))


def _shape(template: list[str]) -> str:
    head = template[0].split()[0].lower() if template else "?"
    anchor = "attribute" if any("person whose" in t for t in template) else "name"
    return f"{head}-{anchor}"


def question_records(raw_dir: Path) -> list[Question]:
    """PhantomWiki's questions as `Question`s (split not yet assigned), duplicates dropped."""
    path = raw_dir / "questions.json"
    out: list[Question] = []
    seen: set[str] = set()
    for i, q in enumerate(_load_json(path, "questions")):
        _need(q, ("id", "question", "answer", "template", "type", "difficulty",
                  "is_aggregation_question"), path, i)
        if q["question"] in seen:
            continue
        seen.add(q["question"])
        template = q["template"] if isinstance(q["template"], list) else [str(q["template"])]
        query = (q.get("prolog") or {}).get("query", [])
        out.append(Question(
            id=f"pwq{len(out):04d}", question=q["question"], answers=[str(a) for a in q["answer"]],
            split="", qclass=_shape(template), template=f"pw_t{q['type']}", collection=COLLECTION,
            metric="pw_set_f1", keys=query_keys(query),
            extra={"pw_id": str(q["id"]), "type": str(q["type"]), "difficulty": str(q["difficulty"]),
                   "is_aggregation_question": str(bool(q["is_aggregation_question"])).lower(),
                   "template_text": " ".join(template), "prolog_query": dumps_json(query)},
        ))
    return out


def convert(raw_dir: str | Path, sizes: Sizes | None = None, seed: int = 1, reserved: int = 2,
            config: dict | None = None) -> Bundle:
    """A Bundle from a PhantomWiki output folder (articles.json and questions.json); every question is
    placed in a split, `sizes` read as proportions."""
    raw = Path(raw_dir)
    docs = article_docs(raw)
    questions, record = assign_proportional(question_records(raw), sizes or Sizes(), reserved, seed)
    cfg = dict(config or {})
    cfg.update({"split_seed": seed, **record})
    return Bundle(name="phantomwiki", corpus=docs, questions=questions, config=cfg)


def build_phantomwiki(work_dir: str | Path, cfg: PWConfig | None = None, sizes: Sizes | None = None) -> Bundle:
    """Generate with the official generator into `work_dir/raw`, then convert."""
    cfg = cfg or PWConfig()
    raw = generate(Path(work_dir) / "raw", cfg)
    return convert(raw, sizes, seed=cfg.seed, config={"generator": "phantom-wiki==1.0.3", **asdict(cfg)})
