"""Render a universe's facts through fixed templates into atomic one-sentence documents."""

from __future__ import annotations

import random
from dataclasses import dataclass

from librarian.datasets.kbgym.universe import Universe
from librarian.datasets.records import CorpusDoc

# relation -> sentence; {s} is the subject's full name, {o} the object (a name or a value)
FACT_TEMPLATES: dict[str, str] = {
    "job": "{s}'s job is {o}.",
    "hobby": "{s}'s hobby is {o}.",
    "city": "{s} lives in {o}.",
    "birthdate": "{s} was born on {o}.",
    "mother": "{s}'s mother is {o}.",
    "father": "{s}'s father is {o}.",
    "child": "{s}'s child is {o}.",
    "sibling": "{s}'s sibling is {o}.",
    "spouse": "{s}'s spouse is {o}.",
    "friend": "{s}'s friend is {o}.",
}
PERSON_RELATIONS = ("mother", "father", "child", "sibling", "spouse", "friend")
ATTRIBUTES = ("job", "hobby", "city", "birthdate")

COLLECTION = "kbgym"


@dataclass(frozen=True, slots=True)
class Fact:
    """(relation, subject pid, object): the object is a pid for person relations, else a value."""

    rel: str
    subj: str
    obj: str

    @property
    def origin(self) -> str:
        return f"{self.rel}:{self.subj}:{self.obj}"


def universe_facts(u: Universe) -> list[Fact]:
    """Every fact of the universe, person by person, in a fixed order."""
    out: list[Fact] = []
    for p in u.people.values():
        out.append(Fact("job", p.pid, p.job))
        out.append(Fact("hobby", p.pid, p.hobby))
        out.append(Fact("city", p.pid, p.city))
        out.append(Fact("birthdate", p.pid, p.birthdate.isoformat()))
        for rel in PERSON_RELATIONS:
            for other in u.relation(p.pid, rel):
                out.append(Fact(rel, p.pid, other))
    return out


def render(fact: Fact, u: Universe) -> str:
    """The one sentence stating `fact`."""
    subj = u.people[fact.subj].name
    obj = u.people[fact.obj].name if fact.rel in PERSON_RELATIONS else fact.obj
    return FACT_TEMPLATES[fact.rel].format(s=subj, o=obj)


def build_corpus(u: Universe) -> tuple[list[CorpusDoc], dict[Fact, str]]:
    """Documents in a seeded shuffled order (ids `kb00000`...) and the fact -> doc id index."""
    facts = universe_facts(u)
    rng = random.Random(f"kbgym-docs:{u.seed}:{len(u.people)}")
    rng.shuffle(facts)
    docs: list[CorpusDoc] = []
    index: dict[Fact, str] = {}
    for i, f in enumerate(facts):
        doc_id = f"kb{i:05d}"
        index[f] = doc_id
        docs.append(
            CorpusDoc(
                id=doc_id,
                text=render(f, u),
                origin=f.origin,
                collection=COLLECTION,
                source=f.rel,
                title=u.people[f.subj].name,
            )
        )
    return docs, index
