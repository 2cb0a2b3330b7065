"""The KBGym universe: a fictional population sampled deterministically from a seed.

People live in family trees (parents, children, siblings, spouses), have
friends, one job, one hobby, one city and a distinct birthdate. First names
are reused across people so every subject has name distractors; full names
are unique.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from dataclasses import dataclass, field

from librarian.datasets.kbgym.names import CITIES, FEMALE_FIRST, HOBBIES, JOBS, MALE_FIRST, SURNAMES
from librarian.datasets.records import DatasetError

MAX_KEY_SIZE = 38  # no city, job or hobby has more members (link_many accepts 40)


@dataclass(slots=True)
class Person:
    """One person; relations hold person ids (`p0001`)."""

    pid: str
    first: str
    last: str
    gender: str  # "female" | "male"
    birthdate: dt.date
    job: str
    hobby: str
    city: str
    mother: str | None = None
    father: str | None = None
    spouse: str | None = None
    children: list[str] = field(default_factory=list)
    friends: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.first} {self.last}"


@dataclass(slots=True)
class Universe:
    """All people by id, in creation order, plus the seed that made them."""

    people: dict[str, Person]
    seed: int

    def by_name(self) -> dict[str, Person]:
        return {p.name: p for p in self.people.values()}

    def siblings(self, pid: str) -> list[str]:
        """People sharing at least one parent with `pid` (sorted by id)."""
        p = self.people[pid]
        parents = [x for x in (p.mother, p.father) if x]
        sibs = {c for par in parents for c in self.people[par].children if c != pid}
        return sorted(sibs)

    def relation(self, pid: str, rel: str) -> list[str]:
        """Person ids related to `pid` by `rel` (mother, father, spouse, child, sibling, friend)."""
        p = self.people[pid]
        if rel in ("mother", "father", "spouse"):
            other = getattr(p, rel)
            return [other] if other else []
        if rel == "child":
            return sorted(p.children)
        if rel == "sibling":
            return self.siblings(pid)
        if rel == "friend":
            return sorted(p.friends)
        raise DatasetError(f"unknown relation {rel!r}")


@dataclass(frozen=True, slots=True)
class UniverseConfig:
    """Generator knobs. `friend_degree` is the mean number of friends per person."""

    people: int = 500
    seed: int = 1
    friend_degree: float = 3.1
    max_children: int = 4
    marry_prob: float = 0.7

    def __post_init__(self) -> None:
        if self.people < 60:
            raise DatasetError(f"--people must be at least 60 (got {self.people})")
        if self.people > 5000:
            raise DatasetError(f"--people must be at most 5000 (got {self.people})")


def _skeleton(cfg: UniverseConfig, rng: random.Random) -> list[dict]:
    """Family trees as dicts (gender, generation, parents, spouse); names come later."""
    people: list[dict] = []

    def new(gender: str, gen: int, mother=None, father=None, family=None) -> int:
        people.append({"gender": gender, "gen": gen, "mother": mother, "father": father,
                       "spouse": None, "family": family if family is not None else len(people)})
        return len(people) - 1

    n = cfg.people
    while len(people) < n:
        # a founder couple, then generations below it
        if n - len(people) < 2:
            new(rng.choice(["female", "male"]), 0)
            break
        a = new("female", 0)
        b = new("male", 0)
        people[a]["spouse"], people[b]["spouse"] = b, a
        people[a]["family"] = people[b]["family"]
        couples = [(a, b, 0)]
        while couples and len(people) < n:
            mother, father, gen = couples.pop(0)
            for _ in range(rng.randint(1, cfg.max_children)):
                if len(people) >= n:
                    break
                c = new(rng.choice(["female", "male"]), gen + 1, mother, father, people[father]["family"])
                if gen + 1 < 3 and len(people) < n and rng.random() < cfg.marry_prob:
                    other = "male" if people[c]["gender"] == "female" else "female"
                    s = new(other, gen + 1)  # an in-law: no parents in the universe
                    people[c]["spouse"], people[s]["spouse"] = s, c
                    m, f = (c, s) if people[c]["gender"] == "female" else (s, c)
                    people[s]["family"] = people[c]["family"]
                    couples.append((m, f, gen + 1))
    return people


def _names(skel: list[dict], rng: random.Random) -> list[tuple[str, str]]:
    """(first, last) per person: unique full names, every first name used at least twice."""
    n = len(skel)
    last: list[str | None] = [None] * n
    surnames = list(SURNAMES)
    rng.shuffle(surnames)
    extra = 0
    for i, p in enumerate(skel):
        if p["father"] is not None:
            last[i] = last[p["father"]]
        elif p["mother"] is not None:
            last[i] = last[p["mother"]]
        else:
            if extra < len(surnames):
                last[i] = surnames[extra]
            else:  # more roots than surnames: double-barrelled names stay fictional
                a, b = surnames[extra % len(surnames)], surnames[(extra * 7 + 3) % len(surnames)]
                last[i] = f"{a}-{b}"
            extra += 1
    first: list[str | None] = [None] * n
    taken: set[tuple[str, str]] = set()
    for gender, pool in (("female", FEMALE_FIRST), ("male", MALE_FIRST)):
        idx = [i for i in range(n) if skel[i]["gender"] == gender]
        if not idx:
            continue
        size = max(2, min(len(pool), len(idx) // 3))
        names = list(pool[:size])
        rng.shuffle(idx)
        for k, i in enumerate(idx):
            free = [names[(k + step) % len(names)] for step in range(len(names))]
            free = [c for c in free if (c, last[i]) not in taken]
            if not free:  # a big family used every name: widen the pool
                if len(names) == len(pool):
                    raise DatasetError("cannot give unique names: increase the name pools")
                names.append(pool[len(names)])
                free = [names[-1]]
            first[i] = free[0]
            taken.add((free[0], last[i]))  # type: ignore[arg-type]
        counts = Counter(first[i] for i in idx)
        for i in idx:  # every first name is shared by at least two people (name distractors)
            if counts[first[i]] >= 2:
                continue
            for cand in names:
                if counts[cand] >= 2 and (cand, last[i]) not in taken:
                    taken.discard((first[i], last[i]))
                    counts[first[i]] -= 1
                    first[i] = cand
                    counts[cand] += 1
                    taken.add((cand, last[i]))  # type: ignore[arg-type]
                    break
            else:  # give the lone name to someone whose own name stays shared
                for j in idx:
                    if counts[first[j]] >= 3 and (first[i], last[j]) not in taken:
                        taken.discard((first[j], last[j]))
                        counts[first[j]] -= 1
                        first[j] = first[i]
                        counts[first[i]] += 1
                        taken.add((first[i], last[j]))  # type: ignore[arg-type]
                        break
    return [(f, s) for f, s in zip(first, last, strict=True)]  # type: ignore[misc]


def _capped_choice(options: tuple[str, ...], counts: Counter, rng: random.Random) -> str:
    while True:
        pick = rng.choice(options)
        if counts[pick] < MAX_KEY_SIZE:
            counts[pick] += 1
            return pick


def _birthdates(skel: list[dict], rng: random.Random) -> list[dt.date]:
    """Distinct dates; each generation about 28 years after the one above it."""
    used: set[dt.date] = set()
    out: list[dt.date] = []
    for p in skel:
        parents = [out[x] for x in (p["mother"], p["father"]) if x is not None]
        lo = (max(parents).year + 20) if parents else 1900 + 28 * p["gen"]
        while True:
            d = dt.date(rng.randint(lo, lo + 14), rng.randint(1, 12), rng.randint(1, 28))
            if d not in used:
                used.add(d)
                out.append(d)
                break
    return out


def _friendships(n: int, degree: float, family: list[int], rng: random.Random) -> list[set[int]]:
    """An undirected friendship graph; friends come from different families."""
    friends: list[set[int]] = [set() for _ in range(n)]
    target = int(round(n * degree / 2))
    edges = 0
    attempts = 0
    while edges < target and attempts < target * 50:
        attempts += 1
        a, b = rng.randrange(n), rng.randrange(n)
        if a == b or b in friends[a] or family[a] == family[b]:
            continue
        if len(friends[a]) >= 9 or len(friends[b]) >= 9:
            continue
        friends[a].add(b)
        friends[b].add(a)
        edges += 1
    return friends


def generate_universe(cfg: UniverseConfig) -> Universe:
    """Sample the population of `cfg` (same config, same universe)."""
    rng = random.Random(f"kbgym-universe:{cfg.seed}:{cfg.people}")
    skel = _skeleton(cfg, rng)
    names = _names(skel, rng)
    dates = _birthdates(skel, rng)
    job_n: Counter = Counter()
    hobby_n: Counter = Counter()
    city_n: Counter = Counter()
    n = len(skel)
    families = [p["family"] for p in skel]
    friend_sets = _friendships(n, cfg.friend_degree, families, rng)
    pid = [f"p{i:04d}" for i in range(n)]
    people: dict[str, Person] = {}
    for i, p in enumerate(skel):
        people[pid[i]] = Person(
            pid=pid[i],
            first=names[i][0],
            last=names[i][1],
            gender=p["gender"],
            birthdate=dates[i],
            job=_capped_choice(JOBS, job_n, rng),
            hobby=_capped_choice(HOBBIES, hobby_n, rng),
            city=_capped_choice(CITIES, city_n, rng),
            mother=pid[p["mother"]] if p["mother"] is not None else None,
            father=pid[p["father"]] if p["father"] is not None else None,
            spouse=pid[p["spouse"]] if p["spouse"] is not None else None,
            friends=sorted(pid[j] for j in friend_sets[i]),
        )
    for person in people.values():
        for par in (person.mother, person.father):
            if par:
                people[par].children.append(person.pid)
    return Universe(people=people, seed=cfg.seed)
