"""The scripted KBGym reader: plans search / read steps from the question's wording alone.

Each turn it rebuilds what it knows from its own visible transcript (the
facts in search snippets and reads, which queries and pages it already ran,
which index documents it read) and evaluates the question's plan
(`scripted.kbgym.parse_question`) against that knowledge. Evaluation either
yields the answer or names the first missing piece (a `KBGymNeed`), whose next
action is chosen by fixed rules:

- a value (someone's job, mother...) is found when a snippet states it; a set
  (residents of a city, someone's friends) is complete when a result page
  drifts to documents that do not state a member (ranked search puts the
  members first), or when a read index document's links show members;
- an index document (a hit that is not a fact sentence and names the key) is
  read when the page did not settle the need: one read returns every linked
  fact, which is what a curated store makes cheaper;
- with one action left it answers with what it has.

`trust` says what counts as evidence. `index` (the default, as measured by
the earlier builder presets): any fact sentence it reads, and an index
document that names the key and links one of its facts settles the set, so
a partial index makes a wrong count. `provenance` (paper 000's faithful
fallback): only raw documents are evidence (raw search hits, raw reads, and
the raw sources a read shows when the tools run with `read_sources`); a
synthetic file is navigation. It first reads the raw results of the key's
search to its retrieval `depth` (raw hits a query yields; 0: every page),
then, while it has actions for a page, a read and the answer, looks through
further result pages for a synthetic file named after the key (a reader
navigates by file names; raw hits past the depth are not used), and reads
the first it meets, adding its sources' facts: what it knows always includes what the flat
store would have shown it, so an index can add members but never take the
flat answer away.

It never sees a gold answer or the universe: only the conversation.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted.base import task_question, tool_call_text
from librarian.models.scripted.kbgym import (
    SET_RELATIONS,
    Event,
    Expr,
    SearchHit,
    StatedFact,
    budget_from_prompt,
    parse_fact,
    parse_question,
    transcript,
)
from librarian.models.scripted.phantom import event_texts, is_phantom_question, reads_as_phantom
from librarian.models.scripted.phantom_reader import reader_step

UNKNOWN = "unknown"
TRUSTS = ("index", "provenance")
MAX_SET_PAGES = 9  # 40 members at most per key, five a page
MAX_VALUE_PAGES = 3


@dataclass(frozen=True, slots=True)
class KBGymNeed:
    """A missing piece: a value of `anchor` (kind 'value'), or a set ('group', 'members')."""

    kind: str  # value | group | members
    anchor: str  # the person's name, or the attribute value
    rel: str  # the relation or attribute
    max_pages: int = MAX_SET_PAGES

    @property
    def query(self) -> str:
        if self.kind == "group":  # the key itself: its facts, and an index naming it, rank first
            return f"born on {self.anchor}" if self.rel == "birthdate" else self.anchor
        if self.rel == "city":
            return f"{self.anchor} lives in"
        if self.rel == "birthdate":
            return f"{self.anchor} was born on"
        return f"{self.anchor}'s {self.rel}"

    def matches(self, f: StatedFact) -> bool:
        """True when the fact states (part of) what this need asks for."""
        if self.kind == "group":
            return f.rel == self.rel and f.obj.lower() == self.anchor.lower()
        if self.kind == "value":
            return f.subj == self.anchor and f.rel == self.rel
        return self.member(f) is not None

    def member(self, f: StatedFact) -> str | None:
        """The member a fact shows for a set need (None if it shows none)."""
        if self.kind == "group":
            return f.subj if self.matches(f) else None
        if self.kind != "members":
            return None
        if f.subj == self.anchor and f.rel == self.rel:
            return f.obj
        if f.obj == self.anchor and self.rel in ("friend", "sibling") and f.rel == self.rel:
            return f.subj  # symmetric relations
        if f.obj == self.anchor and self.rel == "child" and f.rel in ("mother", "father"):
            return f.subj
        return None

    def names_index(self, text: str) -> bool:
        """True when a non-fact document's text names this need's key (so it may index it)."""
        return self.anchor.lower() in text.lower()

    def names_file(self, path: str) -> bool:
        """True when a file's name names this need's key, words joined any way (`index/city-port-avel.md` names
        Port Avel)."""
        return _slug(self.anchor) in _slug(path.rsplit("/", 1)[-1])


def _slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


class KBGymPending(Exception):  # noqa: N818 - control flow, not an error
    """Evaluation stopped at a need the transcript does not settle yet."""

    def __init__(self, need: KBGymNeed) -> None:
        super().__init__(need.query)
        self.need = need


class KBGymKnowledge:
    """What the transcript shows: facts, pages per query, index documents seen and read.

    `trust` and `depth` as in the module docstring (`provenance` keeps only raw evidence, the first `depth` raw
    hits of each query)."""

    def __init__(self, events: Sequence[Event], final: bool = False, trust: str = "index", depth: int = 0,
                 left: int = 0) -> None:
        if trust not in TRUSTS:
            raise ValueError(f"reader trust must be one of {', '.join(TRUSTS)}, got {trust!r}")
        if depth < 0:
            raise ValueError(f"reader depth must be >= 0 (0: every page), got {depth}")
        self.final = final  # no more actions: unsettled needs count as exhausted
        self.left = left  # actions left, this one included (0: unknown)
        self.provenance = trust == "provenance"
        self.depth = depth
        self.facts: set[StatedFact] = set()
        self.pages: dict[str, list[Event]] = defaultdict(list)
        self.index_hits: dict[str, str] = {}  # id -> text of non-fact hits
        self.reads: dict[str, Event] = {}
        for e in events:
            if e.error:
                continue
            if e.name == "search" and e.query is not None:
                self.pages[e.query].append(e)
                for h in e.hits:
                    f = None if self.provenance else h.fact
                    if f is None:
                        if h.kind != "raw":  # an authored document (an index); raw notes are not
                            self.index_hits.setdefault(h.id, h.text)
                    else:
                        self.facts.add(f)
            elif e.name == "read" and e.read_id is not None:
                self.reads[e.read_id] = e
                docs = [e.read_text, *(x.text for x in e.linked)]
                if self.provenance:  # raw text only: the synthetic layer's own sentences are claims
                    docs = [e.read_text] * (e.read_kind == "raw") + [x.text for x in e.linked if x.kind == "raw"]
                for doc in docs:
                    for line in doc.splitlines():
                        f = parse_fact(line)
                        if f is not None:
                            self.facts.add(f)
        if self.provenance:
            for query in self.pages:
                self.facts.update(f for h in self.raw_hits(query) if (f := h.fact) is not None)

    def raw_hits(self, query: str) -> list[SearchHit]:
        """The raw hits of `query`'s pages in rank order, the first `depth` of them (all with depth 0)."""
        hits = [h for e in sorted(self.pages.get(query, ()), key=lambda e: e.page) for h in e.hits if h.kind == "raw"]
        return hits[:self.depth] if self.depth else hits

    def raw_route(self, need: KBGymNeed) -> str:
        """Where the flat reading of `need`'s search stands (provenance trust): `open` (read the next page),
        `complete` (the results drifted past the need or ran out: everything is seen) or `capped` (the depth or
        the page limit cut it: an index may still add)."""
        pages = self.pages.get(need.query, [])
        if not pages:
            return "open"
        hits = self.raw_hits(need.query)
        if need.kind == "value" and any(h.fact is not None and need.matches(h.fact) for h in hits):
            return "complete"
        if self._drifted_hits(need, hits):
            return "complete"
        if self.depth and len(hits) >= self.depth:
            return "capped"
        last = max(pages, key=lambda e: e.page)
        if not last.has_more:
            return "complete"
        return "capped" if len(pages) >= need.max_pages else "open"

    def _drifted_hits(self, need: KBGymNeed, hits: Sequence[SearchHit]) -> bool:
        """The raw results moved past what the need asks for (ranked search puts it first)."""
        if need.kind == "value":
            return any(h.fact is not None and not need.matches(h.fact) for h in hits)
        if need.kind == "group":
            return any(h.fact is not None and not need.names_index(h.text) for h in hits)
        return any(not need.names_index(h.text) for h in hits)

    def may_look_further(self, need: KBGymNeed) -> bool:
        """Provenance trust, past the raw route: whether one more result page may still show an index named after
        the key (more pages exist, and actions remain for that page, the read and the answer)."""
        pages = self.pages.get(need.query, [])
        if not pages or self.left < 3:
            return False
        return max(pages, key=lambda e: e.page).has_more and len(pages) < need.max_pages

    # ----- need status
    def _read_index_settles(self, need: KBGymNeed) -> bool:
        if self.provenance:  # an index is never the whole truth
            return False
        for e in self.reads.values():
            if parse_fact(e.read_text) is None and need.names_index(e.read_text):
                if any((f := parse_fact(x.text)) is not None and need.matches(f) for x in e.linked):
                    return True
        return False

    def unread_index(self, need: KBGymNeed) -> str | None:
        """An index document seen in this need's results that names its key and was not read yet (provenance
        trust: a synthetic file whose name names the key, as a reader navigates by file names; it follows the
        first such file it meets and no other)."""
        if self.provenance and any(h.id in self.reads for e in self.pages.get(need.query, ()) for h in e.hits
                                   if h.id in self.index_hits and need.names_file(h.path)):
            return None
        for e in sorted(self.pages.get(need.query, ()), key=lambda e: e.page):
            for h in e.hits:
                names = need.names_file(h.path) if self.provenance else need.names_index(h.text)
                if h.id in self.index_hits and h.id not in self.reads and names:
                    return h.id
        return None

    def exhausted(self, need: KBGymNeed) -> bool:
        """True when the need's search has nothing more to give (or no actions are left)."""
        if self.final or self._read_index_settles(need):
            return True
        if self.provenance:
            route = self.raw_route(need)
            return route == "complete" or (route == "capped" and self.unread_index(need) is None
                                           and not self.may_look_further(need))
        pages = self.pages.get(need.query, [])
        if not pages:
            return False
        last = max(pages, key=lambda e: e.page)
        if not last.has_more or len(pages) >= need.max_pages:
            return True
        return self._drifted(need, last, pages)

    def _drifted(self, need: KBGymNeed, last: Event, pages: list[Event]) -> bool:
        """Ranked search puts what the need asks for first; this says when the results moved past it."""
        if need.kind == "value":  # a page showing other facts: the one asked for would have ranked above them
            return any(h.fact is not None and not need.matches(h.fact) for h in last.hits)
        if need.kind == "group":  # the key's value appears only in its members' facts
            return any(h.fact is not None and not need.names_index(h.text) for h in last.hits)
        # a relation's facts tie with the person's other facts: stop once a page shows no new member
        # and has moved on to documents that do not name the person at all
        before = {m for e in pages if e.page < last.page for h in e.hits if h.fact and (m := need.member(h.fact))}
        new = any(h.fact and (m := need.member(h.fact)) and m not in before for h in last.hits)
        return not new and any(not need.names_index(h.text) for h in last.hits)

    # ----- evaluation
    def value(self, person: str, rel: str) -> str | None:
        need = KBGymNeed("value", person, rel, MAX_VALUE_PAGES)
        found = sorted(f.obj for f in self.facts if need.matches(f))
        if found:
            return found[0]
        if self.exhausted(need):
            return None
        raise KBGymPending(need)

    def members(self, need: KBGymNeed) -> set[str]:
        got = {m for f in self.facts if (m := need.member(f)) is not None}
        if self.exhausted(need):
            return got
        raise KBGymPending(need)

    def eval_set(self, expr: Expr) -> set[str]:
        kind = expr[0]
        if kind == "group":
            return self.members(KBGymNeed("group", expr[2], expr[1]))
        if kind == "members":
            person = self.eval_person(expr[1])
            return set() if person is None else self.members(KBGymNeed("members", person, expr[2]))
        if kind == "members_of":
            out: set[str] = set()
            for p in sorted(self.eval_set(expr[1])):
                out |= self.members(KBGymNeed("members", p, expr[2]))
            return out
        if kind == "and":
            return self.eval_set(expr[1]) & self.eval_set(expr[2])
        if kind == "filter":
            return self.filter(self.eval_set(expr[1]), expr[2], expr[3])
        raise ValueError(f"not a set expression: {expr!r}")

    def filter(self, people: set[str], attr: str, value: str) -> set[str]:
        """Members whose attr is value: one probe of the key's search (an index settles it), then lookups."""
        if not people:
            return set()
        probe = KBGymNeed("group", value, attr, max_pages=1)
        try:
            group = self.members(probe)
        except KBGymPending:
            if not self.final:
                raise
            group = set()
        if self._read_index_settles(probe):
            return people & group
        out = set()
        for p in sorted(people):
            if p in group or self.value(p, attr) == value:
                out.add(p)
        return out

    def eval_person(self, expr: Expr) -> str | None:
        if expr[0] == "person":
            return expr[1]
        if expr[0] == "rel":
            base = self.eval_person(expr[1])
            return None if base is None else self.value(base, expr[2])
        raise ValueError(f"not a person expression: {expr!r}")

    def eval_value(self, expr: Expr) -> str | None:
        if expr[0] == "attr":
            person = self.eval_person(expr[1])
            return None if person is None else self.value(person, expr[2])
        return self.eval_person(expr)


def _superlative(k: KBGymKnowledge, people: set[str], oldest: bool) -> str | None:
    dated = []
    for p in sorted(people):
        d = k.value(p, "birthdate")
        if d is not None:
            dated.append((d, p))
    if not dated:
        return None
    return (min(dated) if oldest else max(dated))[1]


def answer_for(question: str, k: KBGymKnowledge) -> str:
    """The answer the knowledge supports, or raise `KBGymPending` with the next need."""
    plan = parse_question(question)
    if plan is None:
        return UNKNOWN
    if plan.op in ("value", "name"):
        return k.eval_value(plan.expr) or UNKNOWN
    people = k.eval_set(plan.expr)
    if plan.op == "count":
        return str(len(people))
    if plan.op in ("oldest", "youngest"):
        return _superlative(k, people, plan.op == "oldest") or UNKNOWN
    return ", ".join(sorted(people)) if people else UNKNOWN


def next_action(need: KBGymNeed, k: KBGymKnowledge) -> str:
    """Read an unread index that names the key, else fetch the next page of the need's search (provenance trust:
    the pages first, to the retrieval depth, then the indexes)."""
    index_id = k.unread_index(need)
    if k.provenance and k.raw_route(need) == "open":
        index_id = None
    if index_id is not None:
        return tool_call_text("read", id=index_id)
    pages = [e.page for e in k.pages.get(need.query, [])]
    return tool_call_text("search", query=need.query, page=max(pages, default=0) + 1)


class KBGymReader:
    """The scripted reader as a policy `(messages, tools) -> assistant message`; `trust` and `depth` as in the
    module docstring."""

    __name__ = "kbgym_reader"

    def __init__(self, trust: str = "index", depth: int = 0) -> None:
        KBGymKnowledge([], trust=trust, depth=depth)  # checks both
        self.trust = trust
        self.depth = depth

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        question = task_question(messages)
        events = transcript(messages)
        if is_phantom_question(question) and reads_as_phantom(question, event_texts(events)):  # PhantomWiki

            return reader_step(question, messages)
        budget = budget_from_prompt(messages)
        used = sum(1 for m in messages if m["role"] == "assistant")
        final = budget is not None and used >= budget - 1
        k = KBGymKnowledge(events, final=final, trust=self.trust, depth=self.depth,
                      left=0 if budget is None else budget - used)
        try:
            return tool_call_text("answer", text=answer_for(question, k))
        except KBGymPending as pending:
            return next_action(pending.need, k)


__all__ = ["SET_RELATIONS", "KBGymKnowledge", "KBGymNeed", "KBGymPending", "KBGymReader", "answer_for"]
