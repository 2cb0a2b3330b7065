"""Memory-Gym (paper 002), programmatic: dated chat sessions between people of a KBGym
universe, and instances (question, answer, evidence sessions, task type) built from
the generator's ledger of what was said when.

Speakers mention their own city, job and hobby (repeated across sessions), change
city and job (the change is said in the session it happens), name relatives and
friends, and tell facts about those third people. Task families:
single-hop localisation (`single-hop`), multi-hop across sessions (`multi-hop`),
summarisation/aggregation (`summarization`) and temporal tracking (`temporal`).
Answers and evidence come from the ledger, so they are exact.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from dataclasses import asdict, dataclass

from librarian.datasets.kbgym.names import CITIES, JOBS
from librarian.datasets.kbgym.universe import Universe, UniverseConfig, generate_universe
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question

COLLECTION = "memorygym"
FAMILIES = ("single-hop", "multi-hop", "summarization", "temporal")
_ASK = {  # {x}: a person or "<speaker>'s <relation>"
    "city": "In which city does {x} live?",
    "job": "What is {x}'s job?",
    "hobby": "What is {x}'s hobby?",
}


@dataclass(frozen=True, slots=True)
class MemoryGymConfig:
    """Generator knobs: how many speakers talk over how many sessions."""

    speakers: int = 6
    sessions: int = 40
    seed: int = 1
    change_prob: float = 0.15
    test_fraction: float = 0.2
    start: str = "2024-01-08"

    def __post_init__(self) -> None:
        if self.speakers < 2:
            raise DatasetError(f"--speakers must be at least 2 (got {self.speakers})")
        if self.sessions < 1:
            raise DatasetError(f"--sessions must be at least 1 (got {self.sessions})")
        if not 0.0 <= self.test_fraction < 1.0:
            raise DatasetError(f"--test-fraction must be in [0, 1) (got {self.test_fraction})")


@dataclass(frozen=True, slots=True)
class Mention:
    """One fact said in one session: `kind` is state, change, relation or third."""

    session: str
    date: dt.date
    speaker: str
    subject: str
    attr: str
    value: str
    kind: str


_STATE = {
    "city": ["Things are calm here in {v}.", "I still live in {v}, nothing new there."],
    "job": ["Work as a {v} keeps me busy.", "Being a {v} is tiring this month."],
    "hobby": ["I spent the weekend on {v} again.", "I keep up with {v} whenever I can."],
}
_CHANGE = {
    "city": "Big news: I moved to {v} last week!",
    "job": "I quit my old job and started working as a {v}.",
}
_THIRD = {
    "city": "By the way, {x} lives in {v}.",
    "job": "Did you know {x} works as a {v}?",
    "hobby": "{x} has taken up {v}, of all things.",
}
_FILLER = ["How have you been?", "Good to hear from you.", "Let's talk again soon.", "Same here, mostly."]


def _third_people(u: Universe, speaker: str, speakers: set[str]) -> list[tuple[str, str]]:
    """(relation, pid) of the speaker's single-valued relatives and first friend."""
    out = [(rel, other) for rel in ("mother", "father", "spouse") for other in u.relation(speaker, rel)]
    friends = [f for f in u.relation(speaker, "friend") if f not in speakers]
    if friends:
        out.append(("friend", friends[0]))
    return [(r, p) for r, p in out if p not in speakers]


def _session(rng, cfg, u, i, date, state, thirds, told, ledger) -> CorpusDoc:
    sid = f"session-{i:03d}"
    pair = rng.sample(sorted(state), 2)
    lines = [f"Session {i + 1} ({date.isoformat()})"]
    for turn, spk in enumerate(pair):
        name = u.people[spk].name
        said = [_FILLER[(i + turn) % len(_FILLER)]]
        if rng.random() < cfg.change_prob:
            attr = rng.choice(["city", "job"])
            pool = CITIES if attr == "city" else JOBS
            new = rng.choice([v for v in pool if v != state[spk][attr]])
            state[spk][attr] = new
            said.append(_CHANGE[attr].format(v=new))
            ledger.append(Mention(sid, date, name, name, attr, new, "change"))
        else:
            attr = rng.choice(["city", "job", "hobby"])
            said.append(rng.choice(_STATE[attr]).format(v=state[spk][attr]))
            ledger.append(Mention(sid, date, name, name, attr, state[spk][attr], "state"))
        if thirds[spk] and rng.random() < 0.6:
            rel, other = rng.choice(thirds[spk])
            oname = u.people[other].name
            if (spk, rel) not in told or rng.random() < 0.3:
                said.append(f"My {rel} {oname} says hello.")
                ledger.append(Mention(sid, date, name, name, rel, oname, "relation"))
                told.add((spk, rel))
            else:
                attr = rng.choice(["city", "job", "hobby"])
                value = getattr(u.people[other], attr)
                said.append(_THIRD[attr].format(x=oname, v=value))
                ledger.append(Mention(sid, date, name, oname, attr, value, "third"))
        lines.append(f"{name}: {' '.join(said)}")
    return CorpusDoc(id=sid, text="\n".join(lines), origin=sid, collection=COLLECTION,
                     source=date.isoformat(), title=f"Session {i + 1} ({date.isoformat()})",
                     path=f"sessions/{sid}",
                     extra={"date": date.isoformat(), "speakers": ", ".join(u.people[p].name for p in pair)})


def synthesize_history(cfg: MemoryGymConfig) -> tuple[Universe, list[CorpusDoc], list[Mention]]:
    """The universe, the dated sessions and the ledger of every mention."""
    rng = random.Random(f"memorygym:{cfg.seed}")
    u = generate_universe(UniverseConfig(people=max(60, cfg.speakers * 10), seed=cfg.seed))
    candidates = [p.pid for p in u.people.values() if p.mother or p.spouse]
    if len(candidates) < cfg.speakers:
        raise DatasetError(f"only {len(candidates)} people can speak; lower --speakers")
    speakers = rng.sample(candidates, cfg.speakers)
    state = {s: {"city": u.people[s].city, "job": u.people[s].job, "hobby": u.people[s].hobby}
             for s in speakers}
    thirds = {s: _third_people(u, s, set(speakers)) for s in speakers}
    date = dt.date.fromisoformat(cfg.start)
    sessions: list[CorpusDoc] = []
    ledger: list[Mention] = []
    told: set[tuple[str, str]] = set()
    for i in range(cfg.sessions):
        sessions.append(_session(rng, cfg, u, i, date, state, thirds, told, ledger))
        date += dt.timedelta(days=rng.randint(3, 12))
    return u, sessions, ledger


def _q(family: str, template: str, question: str, answers: list[str], evidence: list[str], keys: list[str],
       metric: str = "squad_f1") -> Question:
    return Question(id="", question=question, answers=answers, split="", qclass=family, template=template,
                    collection=COLLECTION, metric=metric, support=sorted(set(evidence)), keys=keys,
                    extra={"task_type": family})


def build_instances(ledger: list[Mention]) -> list[Question]:
    """Instances of the four task families, derived from the ledger alone."""
    out: list[Question] = []
    third: dict[tuple[str, str], list[Mention]] = defaultdict(list)
    rel: dict[tuple[str, str], list[Mention]] = defaultdict(list)
    own: dict[tuple[str, str], list[Mention]] = defaultdict(list)
    for m in ledger:
        {"third": third, "relation": rel}.get(m.kind, own)[(m.subject, m.attr)].append(m)
    # single-hop: a third person's fact said exactly once
    for (x, attr), ms in sorted(third.items()):
        if len(ms) == 1:
            out.append(_q("single-hop", "sh_third_attr", "According to the conversations: " + _ASK[attr].format(x=x), [ms[0].value], [ms[0].session], [f"person:{x}", f"{attr}:{ms[0].value}"]))
    # multi-hop: a relative named in one session, their fact told in another
    for (spk, r), ms in sorted(rel.items()):
        names = {m.value for m in ms}
        if len(names) != 1:
            continue
        x = ms[0].value
        for attr in ("city", "job", "hobby"):
            facts = third.get((x, attr), [])
            if len(facts) == 1 and facts[0].session not in {m.session for m in ms}:
                out.append(_q("multi-hop", "mh_relation_attr", _ASK[attr].format(x=f"{spk}'s {r}"),
                              [facts[0].value], [ms[0].session, facts[0].session],
                              [f"person:{spk}", f"relation:{r}", f"{attr}:{facts[0].value}"]))
    speakers = sorted({s for s, _ in own})
    for s in speakers:
        cities = own.get((s, "city"), [])
        if cities:  # summarisation: every city the speaker said they lived in
            out.append(_q("summarization", "su_cities", f"Which cities has {s} said they lived in?",
                          sorted({m.value for m in cities}), [m.session for m in cities], [f"person:{s}"],
                          metric="set_f1"))
        changes = [m for m in own.get((s, "job"), []) if m.kind == "change"]
        if changes:
            out.append(_q("summarization", "su_job_changes", f"How many times did {s} say they changed jobs?",
                          [str(len(changes))], [m.session for m in changes], [f"person:{s}"]))
        # temporal: the city as of a date just after each city mention
        for m in cities:
            later = [c for c in cities if c.date > m.date]
            query = m.date + dt.timedelta(days=1)
            if later and later[0].date <= query:
                continue
            out.append(_q("temporal", "tt_city_on_date", f"Where was {s} living on {query.isoformat()}?",
                          [m.value], [m.session], [f"person:{s}", f"date:{query.isoformat()}"]))
        jobs = own.get((s, "job"), [])
        for i, m in enumerate(jobs):
            if m.kind != "change" or i == 0:
                continue
            if sum(1 for c in changes if c.value == m.value) != 1:
                continue
            prev = jobs[i - 1]
            out.append(_q("temporal", "tt_previous_job", f"What was {s}'s job before they became a {m.value}?",
                          [prev.value], [prev.session, m.session], [f"person:{s}", f"job:{m.value}"]))
    return out


def build_memorygym(cfg: MemoryGymConfig | None = None) -> Bundle:
    """Sessions as the corpus (one document per session) and instances split train/test."""
    cfg = cfg or MemoryGymConfig()
    _, sessions, ledger = synthesize_history(cfg)
    instances = build_instances(ledger)
    rng = random.Random(f"memorygym-split:{cfg.seed}")
    questions = []
    for i, q in enumerate(instances):
        split = "test" if rng.random() < cfg.test_fraction else "train"
        questions.append(Question(**{**{f: getattr(q, f) for f in q.__dataclass_fields__},
                                     "id": f"mg{i:04d}", "split": split}))
    return Bundle(name="memorygym", corpus=sessions, questions=questions, config=asdict(cfg))
