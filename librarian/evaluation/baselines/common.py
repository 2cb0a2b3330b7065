"""What every baseline builder shares: the result record, applying ops with progress, the construction
cost, entity and triple extraction, and the extractive content executor (a summariser).

Extraction reads text the way an offline pipeline would, with no labels: a
KBGym fact sentence ("Ada Moss's job is baker.") becomes its triple through
the same parser the scripted policies use; any other sentence yields its
capitalised names, consecutive names forming a `mentions` triple.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from librarian.models.scripted.kbgym import parse_fact
from librarian.workspace import Op, Workspace
from librarian.workspace.ops import MAX_LINK_MANY_TARGETS, LinkMany
from librarian.workspace.views import estimate_tokens


class BaselineError(ValueError):
    """A baseline was asked for something it cannot build; the message names the option."""


@dataclass
class BuildResult:
    """A built store: the workspace (its trace holds every op), op count, construction cost, details."""

    name: str
    workspace: Workspace
    ops: int
    construction_tokens: int
    info: dict[str, Any] = field(default_factory=dict)


def apply_ops(ws: Workspace, ops: Sequence[Op], desc: str) -> int:
    """Apply `ops` in order (each validated and recorded in the trace); returns how many were applied."""
    for op in tqdm(ops, desc=desc, unit="op", leave=False, disable=len(ops) < 200):
        ws.apply(op)
    return len(ops)


def link_ops(source: str, targets: Sequence[str]) -> list[Op]:
    """`LinkMany` ops linking `source` to `targets` in chunks of the 40 a call allows."""
    unique = list(dict.fromkeys(t for t in targets if t != source))
    return [LinkMany(source, tuple(unique[i:i + MAX_LINK_MANY_TARGETS]))
            for i in range(0, len(unique), MAX_LINK_MANY_TARGETS)]


def written_tokens(ops: Iterable[Op | dict[str, Any]]) -> int:
    """Estimated tokens an op list (ops or trace payloads) writes: texts, READMEs, ids of edges."""
    chars = 0
    for op in ops:
        d = op if isinstance(op, dict) else op.to_dict()
        for key in ("text", "readme"):
            if isinstance(d.get(key), str):
                chars += len(d[key])
        for key in ("links", "provenance", "targets", "sources", "children"):
            if isinstance(d.get(key), list):
                chars += sum(len(x) + 2 for x in d[key])
    return estimate_tokens(chars)


def corpus_tokens(texts: Iterable[str]) -> int:
    """Estimated tokens of reading every text once."""
    return sum(estimate_tokens(len(t)) for t in texts)


def slug(value: str) -> str:
    """A path-safe name ("Port Avel" -> "port-avel")."""
    return "-".join("".join(ch if ch.isalnum() else " " for ch in value.lower()).split()) or "item"


def unique_path(folder: str, name: str, taken: set[str]) -> str:
    """`folder/name`, suffixed -2, -3 ... until unused; records it in `taken`."""
    base = f"{folder}/{name}" if folder else name
    path, i = base, 1
    while path in taken:
        i += 1
        path = f"{base}-{i}"
    taken.add(path)
    return path


# ---- entities and triples ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Triple:
    """(subject, relation, object) read from one sentence."""

    subj: str
    rel: str
    obj: str


_NAME = re.compile(r"\b[A-Z][a-z]+(?:[ -][A-Z][a-z]+)+\b|\b[A-Z][a-z]{2,}\b")
_STOP = frozenset("The This That These Those There Their They Then When Where What Which Who Why How It Its "
                  "In On At Of For From With And But Or If As By To An A We You He She His Her Our Your "
                  "Community Summary Topics".split())
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    """Non-empty sentences (split at . ! ? followed by space, and at line breaks)."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def names(sentence: str) -> list[str]:
    """Capitalised names in a sentence, leading stop words dropped, first-seen order."""
    out = []
    for match in _NAME.finditer(sentence):
        words = match.group(0).replace("-", " ").split()
        while words and words[0] in _STOP:
            words = words[1:]
        if words:
            out.append(" ".join(words))
    return list(dict.fromkeys(out))


def triples(text: str) -> list[Triple]:
    """Triples of a text: KBGym fact sentences parsed exactly, otherwise consecutive names `mentions`."""
    out: list[Triple] = []
    for sent in sentences(text):
        fact = parse_fact(sent)
        if fact is not None:
            out.append(Triple(fact.subj, fact.rel, fact.obj))
            continue
        found = names(sent)
        out.extend(Triple(a, "mentions", b) for a, b in zip(found, found[1:], strict=False))
    return list(dict.fromkeys(out))


def entities(text: str) -> list[str]:
    """The entities a text mentions: every triple's subject and object, then any other capitalised name."""
    found: list[str] = []
    for t in triples(text):
        found += [t.subj, t.obj]
    for sent in sentences(text):
        found += names(sent)
    return list(dict.fromkeys(found))


# ---- the extractive content executor ------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")


def _terms(sentence: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(sentence) if len(w) > 2 and w not in _STOP]


def extractive_summary(texts: Sequence[str], max_sentences: int = 5, max_chars: int = 800) -> str:
    """The most central sentences of `texts`, in their original order.

    A sentence scores the mean, over its terms, of how many of the texts use
    that term (terms shared across the cluster are what it is about); ties
    go to the earlier sentence. Deterministic, no model.
    """
    if max_sentences < 1:
        raise BaselineError(f"max_sentences must be >= 1, got {max_sentences}")
    sents = [s for t in texts for s in sentences(t)]
    sents = list(dict.fromkeys(sents))
    if not sents:
        return ""
    df: Counter[str] = Counter()
    for t in texts:
        df.update(set(_terms(t)))
    scored = []
    for i, s in enumerate(sents):
        terms = _terms(s)
        score = sum(df[w] for w in terms) / len(terms) if terms else 0.0
        scored.append((-score, i))
    chosen: list[int] = []
    chars = 0
    for _, i in sorted(scored):
        if len(chosen) >= max_sentences:
            break
        if chosen and chars + len(sents[i]) + 1 > max_chars:
            continue
        chosen.append(i)
        chars += len(sents[i]) + 1
    return "\n".join(sents[i] for i in sorted(chosen))


def raw_documents(ws: Workspace) -> list[tuple[str, str]]:
    """(id, text) of the active raw documents, in path order."""
    return [(n.id, n.text) for n in sorted(ws, key=lambda n: n.path) if n.kind == "raw"]
