"""PhantomWiki articles as atomic documents: one document per fact, its sentence kept as the origin.

An article lists several people in one sentence ("The friends of X are A, B,
C."). Each such sentence becomes one document per person it names, written
with PhantomWiki's singular wording ("The friend of X is A."); a sentence
stating one fact is kept as it is. The article's `facts` field (its Prolog
facts, in sentence order) says which facts a sentence states; an article
without it is split on ", " after " are ". Every document keeps the
article's title, its section, the sentence it came from (`origin`
`<title>#<sentence number>`, `extra.sentence`) and the Prolog fact
(`extra.fact`, `extra.relation`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from librarian.datasets.records import CorpusDoc, DatasetError

COLLECTION = "phantomwiki"
# the article noun of a predicate where it is not the predicate itself (PhantomWiki's aliases)
NOUNS = {"dob": "date of birth", "job": "occupation"}
_FACT = re.compile(r'^\s*(\w+)\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)\.?\s*$')
_SENTENCE = re.compile(r"^(?P<head>.+?) (?P<verb>is|are) (?P<objects>.+?)\.?$")


@dataclass(frozen=True, slots=True)
class PlFact:
    """One binary Prolog fact of an article: `pred(subject, object)`."""

    pred: str
    subj: str
    obj: str

    @property
    def text(self) -> str:
        return f'{self.pred}("{self.subj}", "{self.obj}").'


def parse_pl_fact(text: str) -> PlFact | None:
    """`sister("A", "B").` as a `PlFact`; None for anything else."""
    m = _FACT.match(text)
    return PlFact(m[1], m[2], m[3]) if m else None


def noun(pred: str) -> str:
    """The singular noun an article uses for a predicate ("dob" -> "date of birth", "sister_in_law" ->
    "sister-in-law")."""
    return NOUNS.get(pred, pred.replace("_", "-"))


def singular_noun(plural: str) -> str:
    """A relation noun in the singular ("sisters-in-law" -> "sister-in-law", "children" -> "child")."""
    head, sep, tail = plural.partition("-in-law")
    for many, one in (("children", "child"), ("wives", "wife")):
        if head.endswith(many):
            return head[: -len(many)] + one + sep + tail
    return (head[:-1] if head.endswith("s") else head) + sep + tail


def singular(pred: str, subj: str, obj: str) -> str:
    """The one-fact sentence PhantomWiki writes for `pred(subj, obj)`."""
    return f"The {noun(pred)} of {subj} is {obj}."


def _sentences(article: str) -> Iterator[tuple[str, str]]:
    """(section, sentence) for every fact line of an article (headings dropped)."""
    section = ""
    for line in article.splitlines():
        line = line.strip()
        if not line or line.startswith("# "):
            continue
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        yield section, line


def _runs(facts: list[PlFact]) -> list[list[PlFact]]:
    """Facts grouped into consecutive runs of one (predicate, subject): one run per article sentence."""
    runs: list[list[PlFact]] = []
    for f in facts:
        if runs and (runs[-1][0].pred, runs[-1][0].subj) == (f.pred, f.subj):
            runs[-1].append(f)
        else:
            runs.append([f])
    return runs


def _split_without_facts(sentence: str) -> list[str]:
    """The objects of a list sentence when the article carries no facts ("... are A, B." -> [A, B])."""
    m = _SENTENCE.match(sentence)
    if not m or m["verb"] != "are":
        return []
    return [x.strip() for x in m["objects"].split(", ") if x.strip()]


def article_documents(article: dict, path: Path, index: int, start: int = 0) -> list[CorpusDoc]:
    """The atomic documents of one article record ({title, article[, facts]}); ids from `pw<start>`."""
    title = str(article["title"])
    sentences = list(_sentences(str(article["article"])))
    raw_facts = article.get("facts")
    runs: list[list[PlFact]] | None = None
    if isinstance(raw_facts, list) and raw_facts:
        parsed = [parse_pl_fact(str(x)) for x in raw_facts]
        bad = [str(x) for x, p in zip(raw_facts, parsed, strict=True) if p is None]
        if bad:
            raise DatasetError(f"{path}: article {index} ({title!r}) has a fact that is not pred(\"A\", \"B\"): "
                               f"{bad[0]!r}")
        runs = _runs([p for p in parsed if p is not None])
        if len(runs) != len(sentences):
            raise DatasetError(f"{path}: article {index} ({title!r}) has {len(sentences)} fact sentences but "
                               f"{len(runs)} groups of facts; expected one group of facts per sentence")
    docs: list[CorpusDoc] = []
    for k, (section, sentence) in enumerate(sentences):
        base = {"section": section, "sentence": sentence}
        if runs is not None:
            run = runs[k]
            if not sentence.rstrip(".").endswith(", ".join(f.obj for f in run)):
                raise DatasetError(f"{path}: article {index} ({title!r}): sentence {sentence!r} does not state the "
                                   f"facts {[f.text for f in run]}")
            parts = [(sentence if len(run) == 1 else singular(f.pred, f.subj, f.obj),
                      {"fact": f.text, "relation": f.pred}) for f in run]
        else:
            objects = _split_without_facts(sentence)
            head = _SENTENCE.match(sentence)
            if len(objects) > 1 and head is not None:
                stem = re.sub(r"^The (.+?) of ", lambda m: f"The {singular_noun(m[1])} of ", head["head"])
                parts = [(f"{stem} is {o}.", {}) for o in objects]
            else:
                parts = [(sentence, {})]
        for j, (text, more) in enumerate(parts):
            extra = {**base, **more}
            if len(parts) > 1:
                extra["part"] = str(j)
            docs.append(CorpusDoc(id=f"pw{start + len(docs):05d}", text=text, origin=f"{title}#{k}",
                                  collection=COLLECTION, source=title, title=title, extra=extra))
    return docs
