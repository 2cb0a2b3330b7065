"""The 26 KBGym question templates in ten classes, each able to enumerate its full instance pool.

An instance carries its slot values, gold answers (from graph traversal), its
support (the documents stating the facts that make each gold true; for
counts and superlatives every member of the counted or compared set) and its
keys ("person:...", "city:...", "job:...", "hobby:...", "date:...",
"relation:...").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from librarian.datasets.kbgym.facts import Fact
from librarian.datasets.kbgym.universe import Universe

ABSTAIN = "unknown"  # the gold answer of an abstention (QC5) question
SINGLE_RELATIONS = ("mother", "father", "spouse")
CLASSES = tuple(f"QC{i}" for i in range(1, 11))
SLOT_KINDS = ("person", "city", "job", "hobby", "date")


@dataclass(frozen=True, slots=True)
class Instance:
    """One question instance of a template."""

    slots: tuple[tuple[str, str], ...]
    question: str
    answers: tuple[str, ...]
    support: tuple[str, ...]
    keys: tuple[str, ...]

    @property
    def slot_keys(self) -> tuple[str, ...]:
        """The keys that name a person, place, job, hobby or date (not relations)."""
        return tuple(k for k in self.keys if k.split(":", 1)[0] in SLOT_KINDS)


class Ctx:
    """The universe plus lookups the templates share."""

    def __init__(self, u: Universe, index: dict[Fact, str]):
        self.u = u
        self.index = index
        self.people = list(u.people.values())
        self.by_city: dict[str, list[str]] = defaultdict(list)
        self.by_job: dict[str, list[str]] = defaultdict(list)
        self.by_hobby: dict[str, list[str]] = defaultdict(list)
        self.by_subject: dict[str, list[str]] = defaultdict(list)
        for f, d in index.items():
            self.by_subject[f.subj].append(d)
        for p in self.people:
            self.by_city[p.city].append(p.pid)
            self.by_job[p.job].append(p.pid)
            self.by_hobby[p.hobby].append(p.pid)

    def doc(self, rel: str, subj: str, obj: str) -> str:
        return self.index[Fact(rel, subj, obj)]

    def attr_doc(self, pid: str, attr: str) -> str:
        p = self.u.people[pid]
        value = p.birthdate.isoformat() if attr == "birthdate" else getattr(p, attr)
        return self.doc(attr, pid, value)

    def name(self, pid: str) -> str:
        return self.u.people[pid].name

    def one(self, pid: str, rel: str) -> str | None:
        got = self.u.relation(pid, rel)
        return got[0] if got else None

    def subject_docs(self, pid: str) -> list[str]:
        return sorted(self.by_subject[pid])


def _inst(slots: dict[str, str], question: str, answers, support, keys) -> Instance:
    return Instance(
        slots=tuple(slots.items()),
        question=question,
        answers=tuple(answers),
        support=tuple(sorted(set(support))),
        keys=tuple(keys),
    )


# ---- QC1: one hop --------------------------------------------------------------------------


def _qc1(attr: str, phrase: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        return [
            _inst({"person": p.name}, phrase.format(P=p.name), [getattr(p, attr)],
                  [c.attr_doc(p.pid, attr)], [f"person:{p.name}"])
            for p in c.people
        ]

    return gen


# ---- QC2 / QC3: two and three hops ---------------------------------------------------------


def _qc2_attr(attr: str, phrase: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        out = []
        for p in c.people:
            for rel in SINGLE_RELATIONS:
                r = c.one(p.pid, rel)
                if r is None:
                    continue
                out.append(_inst({"person": p.name, "rel": rel}, phrase.format(P=p.name, rel=rel),
                                 [getattr(c.u.people[r], attr)],
                                 [c.doc(rel, p.pid, r), c.attr_doc(r, attr)],
                                 [f"person:{p.name}", f"relation:{rel}"]))
        return out

    return gen


def _chains(c: Ctx):
    for p in c.people:
        for rel1 in SINGLE_RELATIONS:
            r1 = c.one(p.pid, rel1)
            if r1 is None:
                continue
            for rel2 in SINGLE_RELATIONS:
                if rel1 == rel2 == "spouse":
                    continue
                r2 = c.one(r1, rel2)
                if r2 is None or r2 == p.pid:
                    continue
                yield p, rel1, r1, rel2, r2


def _qc2_rel_rel(c: Ctx) -> list[Instance]:
    return [
        _inst({"person": p.name, "rel1": rel1, "rel2": rel2},
              f"Who is the {rel2} of {p.name}'s {rel1}?", [c.name(r2)],
              [c.doc(rel1, p.pid, r1), c.doc(rel2, r1, r2)],
              [f"person:{p.name}", f"relation:{rel1}", f"relation:{rel2}"])
        for p, rel1, r1, rel2, r2 in _chains(c)
    ]


def _qc3(attr: str, noun: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        return [
            _inst({"person": p.name, "rel1": rel1, "rel2": rel2},
                  f"What is the {noun} of the {rel2} of {p.name}'s {rel1}?",
                  [getattr(c.u.people[r2], attr)],
                  [c.doc(rel1, p.pid, r1), c.doc(rel2, r1, r2), c.attr_doc(r2, attr)],
                  [f"person:{p.name}", f"relation:{rel1}", f"relation:{rel2}"])
            for p, rel1, r1, rel2, r2 in _chains(c)
        ]

    return gen


# ---- QC4 / QC8: counts ---------------------------------------------------------------------


def _qc4_attr(attr: str, phrase: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        groups = {"city": c.by_city, "job": c.by_job}[attr]
        return [
            _inst({attr: value}, phrase.format(v=value), [str(len(members))],
                  [c.attr_doc(m, attr) for m in members], [f"{attr}:{value}"])
            for value, members in sorted(groups.items())
        ]

    return gen


def _qc4_friend_count(c: Ctx) -> list[Instance]:
    return [
        _inst({"person": p.name}, f"How many friends does {p.name} have?", [str(len(p.friends))],
              [c.doc("friend", p.pid, f) for f in p.friends], [f"person:{p.name}", "relation:friend"])
        for p in c.people
        if p.friends
    ]


def _qc8_grandchildren(c: Ctx) -> list[Instance]:
    out = []
    for p in c.people:
        support, grand = [], set()
        for ch in p.children:
            for g in c.u.people[ch].children:
                grand.add(g)
                support += [c.doc("child", p.pid, ch), c.doc("child", ch, g)]
        if grand:
            out.append(_inst({"person": p.name}, f"How many grandchildren does {p.name} have?",
                             [str(len(grand))], support, [f"person:{p.name}", "relation:child"]))
    return out


def _qc8_city_hobby(c: Ctx) -> list[Instance]:
    out = []
    for city, residents in sorted(c.by_city.items()):
        by_hobby: dict[str, list[str]] = defaultdict(list)
        for r in residents:
            by_hobby[c.u.people[r].hobby].append(r)
        for hobby, members in sorted(by_hobby.items()):
            out.append(_inst({"city": city, "hobby": hobby},
                             f"How many people living in {city} have the hobby {hobby}?", [str(len(members))],
                             [c.attr_doc(m, a) for m in members for a in ("city", "hobby")],
                             [f"city:{city}", f"hobby:{hobby}"]))
    return out


# ---- QC5: abstention -----------------------------------------------------------------------


def _qc5(rel: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        return [
            _inst({"person": p.name}, f"Who is {p.name}'s {rel}?", [ABSTAIN], c.subject_docs(p.pid),
                  [f"person:{p.name}", f"relation:{rel}"])
            for p in c.people
            if c.one(p.pid, rel) is None
        ]

    return gen


# ---- QC6: multi-constraint joins without a name anchor -------------------------------------


_ATTR_PHRASE = {"city": "lives in {v}", "job": "has the job {v}", "hobby": "has the hobby {v}"}


def _qc6(a1: str, a2: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for p in c.people:
            groups[(getattr(p, a1), getattr(p, a2))].append(p.pid)
        return [
            _inst({a1: v1, a2: v2},
                  f"Who {_ATTR_PHRASE[a1].format(v=v1)} and {_ATTR_PHRASE[a2].format(v=v2)}?",
                  sorted(c.name(m) for m in members),
                  [c.attr_doc(m, a) for m in members for a in (a1, a2)], [f"{a1}:{v1}", f"{a2}:{v2}"])
            for (v1, v2), members in sorted(groups.items())
        ]

    return gen


# ---- QC7: set intersection -----------------------------------------------------------------


def _qc7_common_friends(c: Ctx) -> list[Instance]:
    out = []
    for i, a in enumerate(c.people):
        fa = set(a.friends)
        for b in c.people[i + 1:]:
            common = fa.intersection(b.friends)
            if not common:
                continue
            out.append(_inst({"person1": a.name, "person2": b.name},
                             f"Who is a friend of both {a.name} and {b.name}?",
                             sorted(c.name(f) for f in common),
                             [c.doc("friend", x.pid, f) for f in common for x in (a, b)],
                             [f"person:{a.name}", f"person:{b.name}", "relation:friend"]))
    return out


def _qc7_friend_attr(attr: str, phrase: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        out = []
        for p in c.people:
            groups: dict[str, list[str]] = defaultdict(list)
            for f in p.friends:
                groups[getattr(c.u.people[f], attr)].append(f)
            for value, members in sorted(groups.items()):
                out.append(_inst({"person": p.name, attr: value}, phrase.format(P=p.name, v=value),
                                 sorted(c.name(m) for m in members),
                                 [d for m in members for d in (c.doc("friend", p.pid, m), c.attr_doc(m, attr))],
                                 [f"person:{p.name}", f"{attr}:{value}", "relation:friend"]))
        return out

    return gen


# ---- QC9: superlatives over birthdates -----------------------------------------------------


def _superlative(c: Ctx, members: list[str], oldest: bool) -> str:
    pick = min if oldest else max
    return pick(members, key=lambda m: c.u.people[m].birthdate)


def _qc9_group(attr: str, oldest: bool, phrase: str) -> Callable[[Ctx], list[Instance]]:
    def gen(c: Ctx) -> list[Instance]:
        groups = {"city": c.by_city, "job": c.by_job}[attr]
        return [
            _inst({attr: value}, phrase.format(v=value), [c.name(_superlative(c, members, oldest))],
                  [c.attr_doc(m, a) for m in members for a in (attr, "birthdate")], [f"{attr}:{value}"])
            for value, members in sorted(groups.items())
            if len(members) >= 2
        ]

    return gen


def _qc9_oldest_friend(c: Ctx) -> list[Instance]:
    return [
        _inst({"person": p.name}, f"Who is {p.name}'s oldest friend?",
              [c.name(_superlative(c, p.friends, True))],
              [d for f in p.friends for d in (c.doc("friend", p.pid, f), c.attr_doc(f, "birthdate"))],
              [f"person:{p.name}", "relation:friend"])
        for p in c.people
        if len(p.friends) >= 2
    ]


# ---- QC10: reverse lookup with a uniqueness guarantee --------------------------------------


def _qc10_birthdate(c: Ctx) -> list[Instance]:
    return [
        _inst({"date": p.birthdate.isoformat()}, f"Who was born on {p.birthdate.isoformat()}?", [p.name],
              [c.attr_doc(p.pid, "birthdate")], [f"date:{p.birthdate.isoformat()}"])
        for p in c.people
    ]


def _qc10_parent_job(c: Ctx) -> list[Instance]:
    out = []
    for p in c.people:
        by_job: dict[str, list[str]] = defaultdict(list)
        for ch in p.children:
            by_job[c.u.people[ch].job].append(ch)
        for job, kids in sorted(by_job.items()):
            if len(kids) != 1:
                continue  # the uniqueness guarantee
            out.append(_inst({"person": p.name, "job": job}, f"Which child of {p.name} has the job {job}?",
                             [c.name(kids[0])], [c.doc("child", p.pid, kids[0]), c.attr_doc(kids[0], "job")],
                             [f"person:{p.name}", f"job:{job}", "relation:child"]))
    return out


@dataclass(frozen=True, slots=True)
class Template:
    """A question template: its class, whether it is reserved for test_out, and its pool."""

    name: str
    qclass: str
    reserved: bool
    enumerate: Callable[[Ctx], list[Instance]]


TEMPLATES: tuple[Template, ...] = (
    Template("qc1_job", "QC1", False, _qc1("job", "What is {P}'s job?")),
    Template("qc1_city", "QC1", False, _qc1("city", "Which city does {P} live in?")),
    Template("qc1_hobby", "QC1", True, _qc1("hobby", "What is {P}'s hobby?")),
    Template("qc2_rel_job", "QC2", False, _qc2_attr("job", "What is the job of {P}'s {rel}?")),
    Template("qc2_rel_city", "QC2", False, _qc2_attr("city", "Which city does {P}'s {rel} live in?")),
    Template("qc2_rel_rel", "QC2", True, _qc2_rel_rel),
    Template("qc3_rel_rel_job", "QC3", False, _qc3("job", "job")),
    Template("qc3_rel_rel_hobby", "QC3", True, _qc3("hobby", "hobby")),
    Template("qc4_city_count", "QC4", False, _qc4_attr("city", "How many people live in {v}?")),
    Template("qc4_job_count", "QC4", False, _qc4_attr("job", "How many people have the job {v}?")),
    Template("qc4_friend_count", "QC4", True, _qc4_friend_count),
    Template("qc5_no_mother", "QC5", False, _qc5("mother")),
    Template("qc5_no_spouse", "QC5", True, _qc5("spouse")),
    Template("qc6_city_job", "QC6", False, _qc6("city", "job")),
    Template("qc6_city_hobby", "QC6", False, _qc6("city", "hobby")),
    Template("qc6_job_hobby", "QC6", True, _qc6("job", "hobby")),
    Template("qc7_common_friends", "QC7", False, _qc7_common_friends),
    Template("qc7_friend_in_city", "QC7", False, _qc7_friend_attr("city", "Which of {P}'s friends live in {v}?")),
    Template("qc7_friends_job", "QC7", True, _qc7_friend_attr("job", "Which of {P}'s friends have the job {v}?")),
    Template("qc8_city_hobby_count", "QC8", False, _qc8_city_hobby),
    Template("qc8_grandchildren_count", "QC8", True, _qc8_grandchildren),
    Template("qc9_oldest_in_city", "QC9", False,
             _qc9_group("city", True, "Who is the oldest person living in {v}?")),
    Template("qc9_youngest_job", "QC9", False,
             _qc9_group("job", False, "Who is the youngest person with the job {v}?")),
    Template("qc9_oldest_friend", "QC9", True, _qc9_oldest_friend),
    Template("qc10_parent_job", "QC10", False, _qc10_parent_job),
    Template("qc10_birthdate", "QC10", True, _qc10_birthdate),
)
TEMPLATES_BY_NAME: dict[str, Template] = {t.name: t for t in TEMPLATES}


def enumerate_pools(u: Universe, index: dict[Fact, str]) -> dict[str, list[Instance]]:
    """The full instance pool of every template (deterministic order)."""
    ctx = Ctx(u, index)
    return {t.name: t.enumerate(ctx) for t in TEMPLATES}
