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
  occur in at least two documents become entity files `entities/<name>.md`
  whose provenance and links are the documents that mention them. Calendar
  words and note labels ("May", "Attendees:") are not names; a word only ever
  seen at a sentence start is not either; a single word that can only be one
  longer name ("Ada" and "Ada Lovelace") is merged into it.
- `flat`: no ops; the raw store as it is (the reference a build is compared with).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from librarian.models.scripted.kbgym import parse_fact
from librarian.workspace.ops import MAX_LINK_MANY_TARGETS, Add, LinkMany, MakeDir, Op

Shard = list[tuple[str, str]]  # (document id, text)
KeyTable = dict[tuple[str, str], list[str]]  # (kind, value) -> document ids, in document order

EXTRACTIVE = ("kbgym_keys", "entities", "flat")
BUILDERS = (*EXTRACTIVE, "policy")

TITLES = {"person": "{v}", "city": "Residents of {v}", "job": "People whose job is {v}",
          "hobby": "People whose hobby is {v}", "entity": "{v}"}
FOLDERS = {"person": "indexes/person", "city": "indexes/city", "job": "indexes/job", "hobby": "indexes/hobby",
           "entity": "entities"}
SUFFIX = {"entity": ".md"}  # entity files are markdown notes; index documents keep bare names
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
_STOP = frozenset("The This That These Those There Their They Then When Where What Which Who Why How It Its "
                  "In On At Of For From With And But Or If As By To An A We You He She His Her Our Your "
                  "Residents People One Each Every Some All No Not".split())
# capitalised words that are not names: calendar words and the labels and headings of ordinary notes
_NOT_NAMES = frozenset((
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday "
    "mon tue tues wed thu thur thurs fri sat sun today tomorrow yesterday tonight morning afternoon evening "
    "night week weekend month year quarter attendees attendee agenda notes note summary decisions decision "
    "action actions items item todo status owner owners goal goals next steps step update updates question "
    "questions answer answers idea ideas done open closed draft meeting meetings minutes project projects "
    "team teams ref see also fyi tbd subject date time location budget deadline priority context background "
    "problem solution result results conclusion introduction overview details misc other new old yes"
).split()) | {w.lower() for w in _STOP}
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019-][^\W\d_]+)*")
_CAP_START = re.compile(r"(?<![^\W_])[^\W\d_a-z]")  # a word starting with an ASCII capital or any non-ASCII letter
_LINE_START = re.compile(r"\s*(?:(?:[-*+>#]+|\d+[.)])\s*)*")
_AFTER_SENTENCE = re.compile(r"[.!?][\"')\]]*\s+$")
CANDIDATE = "entity?"  # a single capitalised word seen only where any word is capitalised (a sentence start)


def _capitalised(word: str) -> bool:
    return word[0].isupper() and any(ch.islower() for ch in word)


def _strip_possessive(word: str) -> str:
    return word[:-2] if word.endswith(("'s", "\u2019s")) else word


def _runs(text: str) -> Iterator[tuple[list[str], int, int]]:
    """Runs of capitalised words joined by single spaces: (words, start offset, end offset).

    Only word starts that may be capitals are visited (lowercase ASCII words
    are skipped by the regular expression), so a large text is scanned fast.
    """
    words: list[str] = []
    start = end = seen = 0
    for cap in _CAP_START.finditer(text):
        if cap.start() < seen:
            continue  # inside the word just read ("O'Brien")
        m = _WORD.match(text, cap.start())
        if m is None:
            continue
        word, seen = m.group(0), m.end()
        if not _capitalised(word):
            continue
        if words and text[end:m.start()] == " " and not words[-1].endswith(("'s", "\u2019s")):
            words.append(word)
            end = m.end()
            continue
        if words:
            yield words, start, end
        words, start, end = [word], m.start(), m.end()
    if words:
        yield words, start, end


def kbgym_keys(text: str) -> list[tuple[str, str]]:
    """The keys one KBGym fact sentence states: its subject, a related person, and city/job/hobby values."""
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


def _sentence_start(text: str, at: int) -> bool:
    """Whether offset `at` starts a line (after bullets or heading marks) or a sentence."""
    prefix = text[text.rfind("\n", 0, at) + 1:at]
    return _LINE_START.fullmatch(prefix) is not None or _AFTER_SENTENCE.search(prefix) is not None


def entity_keys(text: str) -> list[tuple[str, str]]:
    """Names in a text: runs of two or more capitalised words, and single capitalised words of 3+ letters.

    Calendar words, note labels ("Owner:", "Attendees") and sentence words
    are not names. A single word at the start of a sentence or line is only a
    `CANDIDATE`: it becomes a name if another document uses it mid-sentence.
    """
    names: list[tuple[str, str]] = []
    for words, start, end in _runs(text):
        words = [_strip_possessive(w) for w in words]
        led = False  # a dropped lead word ("In Lisbon"): the name is not at the sentence start
        while words and (words[0] in _STOP or words[0].lower() in _NOT_NAMES):
            words, led = words[1:], True
        while words and words[-1].lower() in _NOT_NAMES:
            words = words[:-1]
        if len(words) > 1:
            names.append(("entity", " ".join(words)))
            if not led and _sentence_start(text, start) and (len(words) > 2 or len(words[1]) >= 3):
                names.append((CANDIDATE, " ".join(words[1:])))  # "Ask Gus Lindqvist": maybe "Gus Lindqvist"
        elif words and len(words[0]) >= 3:
            initial = not led and _sentence_start(text, start)
            if initial and text.startswith(":", end):
                continue  # a label: "Owner: ..."
            names.append((CANDIDATE if initial else "entity", words[0]))
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
    """Which keys become documents: at least `min_docs` members (entities: 2), at most `max_members`.

    `merge_aliases`: a single-word name that is the first or last word of
    exactly one longer name ("Ada" and "Ada Lovelace") is that name.
    """

    min_docs: int = 1
    max_members: int = 400
    merge_aliases: bool = False


def _extend(table: KeyTable, key: tuple[str, str], ids: list[str]) -> None:
    have = table.setdefault(key, [])
    known = set(have)
    have.extend(i for i in dict.fromkeys(ids) if i not in known)


def resolve_entities(table: KeyTable, merge_aliases: bool = True) -> KeyTable:
    """Names from the extracted keys: candidates count where the name is also seen mid-sentence.

    With `merge_aliases`, a single word (a name, or a candidate) that is the
    first or last word of exactly one longer name is merged into it.
    """
    out: KeyTable = {k: list(ids) for k, ids in table.items() if k[0] != CANDIDATE}
    loose: KeyTable = {}
    for (kind, value), ids in sorted(table.items()):
        if kind == CANDIDATE:
            _extend(out if ("entity", value) in out else loose, ("entity", value), ids)
    if not merge_aliases:
        return out
    longer: dict[str, set[str]] = {}
    for kind, value in out:
        words = value.split()
        if kind == "entity" and len(words) > 1:
            for word in (words[0], words[-1]):
                longer.setdefault(word, set()).add(value)
    singles = [(k, out) for k in sorted(out) if k[0] == "entity" and " " not in k[1]]
    singles += [(k, loose) for k in sorted(loose) if " " not in k[1]]
    for key, where in singles:
        full = longer.get(key[1], set())
        if len(full) == 1:
            _extend(out, ("entity", next(iter(full))), where.pop(key))
    return out


def plan_ops(table: KeyTable, options: PlanOptions = PlanOptions()) -> list[Op]:
    """Ops that build one index document per key, grouped in a folder per key kind.

    Keys are ordered by (kind, value), so the op list depends only on the
    corpus: the basis of resuming from a trace. Entity files are `.md` files.
    """
    if any(kind in ("entity", CANDIDATE) for kind, _ in table):
        table = resolve_entities(table, options.merge_aliases)
    keys = sorted(k for k, ids in table.items() if options.min_docs <= len(ids) <= options.max_members)
    ops: list[Op] = []
    made: set[str] = set()
    taken: set[str] = set()
    for kind, value in keys:
        folder = FOLDERS[kind]
        if folder not in made:
            ops.append(MakeDir(folder, FOLDER_README.get(kind, "")))
            made.add(folder)
        suffix = SUFFIX.get(kind, "")
        name, i = slug(value), 1
        while f"{folder}/{name}{suffix}" in taken:
            i += 1
            name = f"{slug(value)}-{i}"
        path = f"{folder}/{name}{suffix}"
        taken.add(path)
        members = tuple(dict.fromkeys(table[(kind, value)]))
        ops.append(Add(TITLES[kind].format(v=value), path=path, provenance=members))
        for start in range(0, len(members), MAX_LINK_MANY_TARGETS):
            ops.append(LinkMany(path, members[start:start + MAX_LINK_MANY_TARGETS]))
    return ops


def default_options(builder: str) -> PlanOptions:
    """`entities` keeps names seen in two or more documents, aliases merged; the others index every key."""
    return PlanOptions(min_docs=2, merge_aliases=True) if builder == "entities" else PlanOptions()
