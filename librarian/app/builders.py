"""Builders `librarian build` can run, by name.

Extractive builders (`kbgym_keys`, `entities`, `flat`) work in two phases:
`extract` maps one shard of documents to the keys each document states (a
pure function, so shards can run on Ray workers), then `plan` turns the
merged key -> documents table into workspace ops, in a deterministic order
(so an interrupted build resumes by replaying its trace and skipping the ops
it already applied). The `policy` builder instead runs the Librarian builder
role with any policy backend (`builder_episode.py`).

- `kbgym_keys`: one index document per person, city, job and hobby named by
  KBGym-style fact sentences ("Ada's job is baker.", "Ada lives in Port
  Avel."), linking the facts that state it (paper 001's index documents).
- `entities`: a GraphRAG-style baseline for any text: capitalised names that
  occur in at least two documents become entity files whose provenance and
  links are the documents that mention them.
- `flat`: no ops; the raw store as it is (the reference a build is compared with).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from librarian.workspace.ops import MAX_LINK_MANY_TARGETS, Add, LinkMany, MakeDir, Op

Shard = list[tuple[str, str]]  # (document id, text)
KeyTable = dict[tuple[str, str], list[str]]  # (kind, value) -> document ids, in document order

EXTRACTIVE = ("kbgym_keys", "entities", "flat")
BUILDERS = (*EXTRACTIVE, "policy")

TITLES = {"person": "{v}", "city": "Residents of {v}", "job": "People whose job is {v}",
          "hobby": "People whose hobby is {v}", "entity": "{v}"}
FOLDERS = {"person": "indexes/person", "city": "indexes/city", "job": "indexes/job", "hobby": "indexes/hobby",
           "entity": "entities"}
FOLDER_README = {
    "person": "One index document per person: it links every fact that names them.",
    "city": "One index document per city: it links the facts of the people who live there.",
    "job": "One index document per job: it links the facts of the people who have it.",
    "hobby": "One index document per hobby: it links the facts of the people who have it.",
    "entity": "One file per name that occurs in two or more documents; it links them.",
}


def slug(value: str) -> str:
    """A path-safe name for a key value ("Port Avel" -> "port-avel")."""
    return "-".join("".join(ch if ch.isalnum() else " " for ch in value.lower()).split()) or "key"


# ---- extraction (pure, per document) -------------------------------------------------------------

_KEY_RELS = {"city": "city", "job": "job", "hobby": "hobby"}
_NAME = re.compile(r"\b[A-Z][a-z]+(?:[ -][A-Z][a-z]+)+\b|\b[A-Z][a-z]{2,}\b")
_STOP = frozenset("The This That These Those There Their They Then When Where What Which Who Why How It Its "
                  "In On At Of For From With And But Or If As By To An A We You He She His Her Our Your "
                  "Residents People One Each Every Some All No Not".split())


def kbgym_keys(text: str) -> list[tuple[str, str]]:
    """The keys one KBGym fact sentence states: its subject, a related person, and city/job/hobby values."""
    from librarian.models.scripted_kbgym import parse_fact

    keys: list[tuple[str, str]] = []
    for line in text.splitlines():
        fact = parse_fact(line)
        if fact is None:
            continue
        keys.append(("person", fact.subj))
        if fact.rel in _KEY_RELS:
            keys.append((_KEY_RELS[fact.rel], fact.obj))
        elif fact.rel in ("mother", "father", "child", "sibling", "spouse", "friend"):
            keys.append(("person", fact.obj))
    return list(dict.fromkeys(keys))


def entity_keys(text: str) -> list[tuple[str, str]]:
    """Capitalised names in a text (single words of 3+ letters, or runs of capitalised words)."""
    names = []
    for match in _NAME.finditer(text):
        name = match.group(0)
        words = name.replace("-", " ").split()
        while words and words[0] in _STOP:
            words = words[1:]
        if words:
            names.append(("entity", " ".join(words)))
    return list(dict.fromkeys(names))


EXTRACTORS = {"kbgym_keys": kbgym_keys, "entities": entity_keys, "flat": lambda _text: []}


def extract_shard(builder: str, shard: Shard) -> KeyTable:
    """Map one shard: key -> ids of the shard's documents that state it (document order)."""
    fn = EXTRACTORS[builder]
    table: KeyTable = {}
    for doc_id, text in shard:
        for key in fn(text):
            table.setdefault(key, []).append(doc_id)
    return table


def merge_tables(tables: Iterable[KeyTable]) -> KeyTable:
    """Reduce shard tables (in shard order) into one."""
    out: KeyTable = {}
    for table in tables:
        for key, ids in table.items():
            out.setdefault(key, []).extend(ids)
    return out


def shards_of(docs: Sequence[tuple[str, str]], n: int) -> list[Shard]:
    """`n` contiguous shards of near-equal size (document order kept)."""
    n = max(1, min(n, len(docs) or 1))
    size, rem = divmod(len(docs), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < rem else 0)
        out.append(list(docs[start:stop]))
        start = stop
    return out


# ---- planning (deterministic ops from the merged table) -------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """Which keys become documents: at least `min_docs` members (entities: 2), at most `max_members`."""

    min_docs: int = 1
    max_members: int = 400


def plan_ops(table: KeyTable, options: PlanOptions = PlanOptions()) -> list[Op]:
    """Ops that build one index document per key, grouped in a folder per key kind.

    Keys are ordered by (kind, value), so the op list depends only on the
    corpus: the basis of resuming from a trace.
    """
    keys = sorted(k for k, ids in table.items() if options.min_docs <= len(ids) <= options.max_members)
    ops: list[Op] = []
    made: set[str] = set()
    taken: set[str] = set()
    for kind, value in keys:
        folder = FOLDERS[kind]
        if folder not in made:
            ops.append(MakeDir(folder, FOLDER_README.get(kind, "")))
            made.add(folder)
        name, i = slug(value), 1
        while f"{folder}/{name}" in taken:
            i += 1
            name = f"{slug(value)}-{i}"
        path = f"{folder}/{name}"
        taken.add(path)
        members = tuple(dict.fromkeys(table[(kind, value)]))
        ops.append(Add(TITLES[kind].format(v=value), path=path, provenance=members))
        for start in range(0, len(members), MAX_LINK_MANY_TARGETS):
            ops.append(LinkMany(path, members[start:start + MAX_LINK_MANY_TARGETS]))
    return ops


def default_options(builder: str) -> PlanOptions:
    """`entities` keeps names seen in two or more documents; the others index every key."""
    return PlanOptions(min_docs=2) if builder == "entities" else PlanOptions()
