"""The scripted PhantomWiki reader: evaluates the question's recursive structure with search / read steps.

The question becomes an expression (`scripted.phantom.parse_question`): a
chain of kinship terms of any depth over a named person or "the person
whose <attribute> is <value>", asked as who / what attribute / how many.
Each term is a path over five base relations plus gender; each turn the
reader rebuilds what it knows from its own visible transcript and evaluates
the expression until the first missing piece (a `PhantomNeed`):

- a person's parents, children, siblings, spouse or friends: one ranked
  search ("The mother and father of <given name>") paged until a page shows
  a fact holding a strict part of the query's words and no stating fact
  after it (every stating fact ranks above such a fact), or the pages end;
- an attribute of a person, or everyone with an attribute value;
- a relation index ("Index great_grandmother_of_x", found because searches
  from a person carry the keys of the terms being evaluated from them) is
  read and trusted: the objects of its linked facts are the term's members;
- a hub (an authored document whose text is exactly a person's name) is read
  when a need's first page did not settle it, and settles every relation
  and attribute of that person; an index naming an attribute value settles
  that group.

With one action left it answers with what it has. It never sees a gold
answer or the universe: only the conversation.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import Stemmer

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted.base import task_question, tool_call_text
from librarian.models.scripted.kbgym import Event, budget_from_prompt, transcript
from librarian.models.scripted.phantom import (
    ATTRIBUTE_WORDS,
    BASE_RELATIONS,
    KIN,
    STATED,
    Expr,
    PhantomFact,
    expr_terms,
    parse_facts,
    parse_question,
)

UNKNOWN = "unknown"
MAX_PAGES = 8
# what a relation need asks the search for, and the fact nouns that state it
NEEDS = {
    "parent": ("The mother and father of {p}", ("mother", "father", "parent")),
    "child": ("The son and daughter of {p}", ("son", "daughter", "child")),
    "sibling": ("The sister and brother of {p}", ("sister", "brother", "sibling")),
    "spouse": ("The husband and wife of {p}", ("husband", "wife", "spouse")),
    "friend": ("The friend of {p}", ("friend",)),
}
_HEADER = re.compile(r"^\[(\w+)\] (.*?)\s+id=(\S+)")
# words English search analyzers drop (Lucene's list): a given name among them cannot rank anything
SEARCH_STOP_WORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their "
                              "then there these they this to was will with".split())


@functools.cache
def _stem(word: str) -> str:
    return Stemmer.Stemmer("porter").stemWord(word)


def _words(text: str) -> list[str]:
    """The words ranked search matches: lower-case, Porter-stemmed ("Carroll" and "Carrol" are one)."""
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in SEARCH_STOP_WORDS]


def given_name(person: str) -> str:
    """The name a query uses for a person: all but the surname, unless that is a word search ignores."""
    given = person.rsplit(" ", 1)[0]
    return person if given == person or given.lower() in SEARCH_STOP_WORDS else given


def norm(text: str) -> str:
    """Lower-case words without punctuation (how a hub's text is matched to a name)."""
    return " ".join(re.sub(r"[^\w\s-]", " ", text.lower()).split())


@dataclass(frozen=True, slots=True)
class PhantomNeed:
    """A missing piece: a base relation of a person ('relation'), a person's attribute ('value'),
    everyone with an attribute value ('group'), or a document to read ('read', anchor = its id).

    A person's query names them by their given name only: a fact naming a
    relative of the same surname would otherwise outrank the facts asked for.
    `keys` are the relation index keys of the kinship terms being evaluated
    from this person ("grandchild_of_hunter_saari"): words no fact holds, so
    they rank that person's index first without changing the order of facts.
    """

    kind: str  # relation | value | group | read
    anchor: str  # the person, the attribute value, or a document id
    rel: str  # the base relation or the attribute
    keys: tuple[str, ...] = field(default=(), compare=False)

    @property
    def query(self) -> str:
        return f"{self.base_query} (key {' '.join(self.keys)})" if self.keys else self.base_query

    @property
    def base_query(self) -> str:
        if self.kind == "relation":
            return NEEDS[self.rel][0].format(p=given_name(self.anchor))
        if self.kind == "value":
            return f"The {ATTRIBUTE_WORDS.get(self.rel, self.rel)} of {given_name(self.anchor)}"
        return f"whose {ATTRIBUTE_WORDS.get(self.rel, self.rel)} is {self.anchor}"

    def variants(self) -> list[list[str]]:
        """The fewest query words (counted) a document stating this need holds, one list per wording."""
        anchor = _words(self.anchor if self.kind == "group" else given_name(self.anchor))
        if self.kind == "relation":
            return [[noun, *anchor] for noun in NEEDS[self.rel][1]]
        return [[*_words(ATTRIBUTE_WORDS.get(self.rel, self.rel)), *anchor]]

    def outranked(self, text: str) -> bool:
        """True when a document that does not state this need must rank below every one that does.

        Ranked search adds a score for each query word a document holds; a
        document holding a strict part of the words (counted) a stating fact
        holds at least scores lower. One repeating a surname, or naming another
        person with the same given name and the relation, may not.
        """
        variants = self.variants()
        vocab = {w for v in variants for w in v}
        found = Counter(w for w in _words(text) if w in vocab)
        return any(found != Counter(v) and not found - Counter(v) for v in variants)

    def matches(self, f: PhantomFact) -> bool:
        """True when the fact states (part of) what this need asks for."""
        if self.kind == "relation":
            return f.rel in NEEDS[self.rel][1] and self.anchor in (f.subj, f.obj)
        if self.kind == "value":
            return f.subj == self.anchor and f.rel == self.rel
        return f.rel == self.rel and f.obj.lower() == self.anchor.lower()


_INDEX_KEY = re.compile(r"(?:^Index |\(key )(?P<key>[a-z0-9_]+_of_[a-z0-9_]+)\)?$")
_KEYS = re.compile(r" \(key [\w ]+\)$")


def index_key(term: str, person: str) -> str:
    """The one-word key of a relation index ("grandchild", "Hunter Saari" -> "grandchild_of_hunter_saari")."""
    return f"{term}_of_{re.sub(r'[^a-z0-9]+', '_', person.lower()).strip('_')}"


def index_text(term: str, person: str) -> str:
    """A relation index's text: its key alone ("Index great_grandmother_of_vicki_hackworth"), a word no
    fact holds, so that only a search carrying the key finds it."""
    return f"Index {index_key(term, person)}"


def parse_index(text: str) -> str | None:
    """The key of a relation index's text (its term a known kinship term); None for any other text."""
    m = _INDEX_KEY.search(" ".join(text.split()))
    if m is None:
        return None
    key = m["key"]
    return key if any(key.startswith(t + "_of_") for t in KIN) else None


def base_query(query: str) -> str:
    """A query without the index keys it carries."""
    return _KEYS.sub("", query)


def query_anchor(query: str) -> tuple[str, str] | None:
    """("person", name) or ("value", value) that a reader query of this module names; None otherwise."""
    query = base_query(query)
    if m := re.fullmatch(r"whose (.+?) is (.+)", query):
        return "value", m[2]
    if m := re.fullmatch(r"The .+? of (.+)", query):
        return "person", m[1]
    return None


class PhantomPending(Exception):  # noqa: N818 - control flow, not an error
    """Evaluation stopped at a need the transcript does not settle yet."""

    def __init__(self, need: PhantomNeed) -> None:
        super().__init__(need.query)
        self.need = need


class PhantomKnowledge:
    """What the transcript shows: facts (with the ids stating them), result pages per query, and the
    authored documents seen and read (person hubs, relation indexes)."""

    def __init__(self, events: Sequence[Event], final: bool = False) -> None:
        self.final = final
        self.fact_ids: dict[PhantomFact, str] = {}
        self.pages: dict[str, list[Event]] = defaultdict(list)
        self.hubs: dict[str, str] = {}  # normalised first line of an authored non-fact document -> id
        self.read: set[str] = set()
        self.read_hubs: set[str] = set()  # normalised first lines of authored documents read
        self.indexes: dict[str, str] = {}  # relation index key -> its id
        self.index_members: dict[str, set[str]] = {}  # read relation indexes: key -> members
        self.derived: dict[tuple[str, str], set[str]] = {}  # (person, term) evaluated along its path
        self._active: dict[str, list[str]] = defaultdict(list)  # indexed terms being evaluated per person
        for e in events:
            if e.error:
                continue
            if e.name == "search" and e.query is not None:
                self.pages[base_query(e.query)].append(e)
                for h in e.hits:
                    self._see(h.id, h.kind, h.text)
            elif e.name == "read" and e.read_id is not None:
                self._read(e)
        self._index()

    def _see(self, doc_id: str, kind: str, text: str) -> list[PhantomFact]:
        """Record a document's facts, or an authored non-fact document as a hub or relation index."""
        facts = [f for line in text.splitlines() for f in parse_facts(line)]
        for f in facts:
            self.fact_ids.setdefault(f, doc_id)
        if not facts and kind != "raw" and text.strip():
            first = text.splitlines()[0].strip()
            if key := parse_index(first):
                self.indexes.setdefault(key, doc_id)
            else:
                self.hubs.setdefault(norm(first), doc_id)
        return facts

    def _read(self, e: Event) -> None:
        self.read.add(e.read_id or "")
        header = _HEADER.match(e.observation.splitlines()[0]) if e.observation else None
        kind = header[1] if header else "raw"
        own = self._see(e.read_id or "", kind, e.read_text)
        linked = [f for x in e.linked for f in self._see(x.id, x.kind, x.text)]
        if own or kind == "raw" or not e.read_text.strip():
            return
        first = e.read_text.splitlines()[0].strip()
        if key := parse_index(first):  # its members are the objects of the facts it links
            self.index_members[key] = {f.obj for f in linked}
        else:
            self.read_hubs.add(norm(first))

    def _index(self) -> None:
        self.rel: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.attrs: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.genders: dict[str, str] = {}
        for f in self.fact_ids:
            if f.rel in STATED:
                base, gender = STATED[f.rel]
                inverse = {"parent": "child", "child": "parent"}.get(base, base)
                self.rel[(f.subj, base)].add(f.obj)
                self.rel[(f.obj, inverse)].add(f.subj)
                if gender:
                    self.genders.setdefault(f.obj, gender)
            else:
                self.attrs[(f.subj, f.rel)].add(f.obj)
                if f.rel == "gender":
                    self.genders[f.subj] = f.obj.lower()

    # ----- need status
    def hub_read(self, person: str) -> bool:
        return norm(person) in self.read_hubs

    def index_read(self, need: PhantomNeed) -> bool:
        """True when an index naming this group's attribute value was read."""
        word = ATTRIBUTE_WORDS.get(need.rel, need.rel)
        return any(need.anchor.lower() in t and word in t for t in self.read_hubs)

    def settled(self, need: PhantomNeed) -> bool:
        if self.final or (need.kind != "group" and self.hub_read(need.anchor)):
            return True
        if need.kind == "group" and self.index_read(need):
            return True
        pages = self.pages.get(need.base_query, [])
        if not pages:
            return False
        last = max(pages, key=lambda e: e.page)
        if not last.has_more or len(pages) >= MAX_PAGES:
            return True
        # ranked search puts every fact stating the need above the facts that hold fewer of its words: a
        # page showing such a fact, and no stating fact after it, has moved past what was asked for
        past = False
        for h in last.hits:
            facts = parse_facts(h.text)
            if any(need.matches(f) for f in facts):
                if past:
                    return False
            elif facts and need.outranked(h.text):
                past = True
        return past

    def unread_hub(self, need: PhantomNeed) -> str | None:
        """An authored document seen anywhere that is this person's hub (or names this group), unread,
        once the need's first page has not settled it."""
        if not self.pages.get(need.base_query):
            return None
        if need.kind == "group":
            word = ATTRIBUTE_WORDS.get(need.rel, need.rel)
            for text, doc_id in self.hubs.items():
                if need.anchor.lower() in text and word in text and doc_id not in self.read:
                    return doc_id
            return None
        doc_id = self.hubs.get(norm(need.anchor))
        return doc_id if doc_id is not None and doc_id not in self.read else None

    # ----- evaluation
    def base(self, person: str, relation: str) -> set[str]:
        need = PhantomNeed("relation", person, relation)
        if not self.settled(need):
            terms = self._active.get(person, [])
            raise PhantomPending(PhantomNeed("relation", person, relation, tuple(index_key(t, person) for t in terms)))
        return set(self.rel.get((person, relation), ()))

    def values(self, person: str, attr: str) -> set[str]:
        found = self.attrs.get((person, attr))
        if found:
            return set(found)
        need = PhantomNeed("value", person, attr)
        if self.settled(need):
            return set()
        raise PhantomPending(need)

    def gender(self, person: str) -> str | None:
        if person in self.genders:
            return self.genders[person]
        found = self.values(person, "gender")
        return sorted(found)[0].lower() if found else None

    def group(self, attr: str, value: str) -> set[str]:
        need = PhantomNeed("group", value, attr)
        if not self.settled(need):
            raise PhantomPending(need)
        return {s for (s, a), vs in self.attrs.items() if a == attr and value.lower() in {v.lower() for v in vs}}

    def related(self, person: str, term: str) -> set[str]:
        """Everyone `term` (a kinship term) names for `person`: a read relation index, else its path."""
        if term in BASE_RELATIONS:
            return self.base(person, term)
        kin = KIN[term]
        if indexed(term):
            key = index_key(term, person)
            if key in self.index_members:
                return set(self.index_members[key])
            if key in self.indexes and not self.final:
                raise PhantomPending(PhantomNeed("read", self.indexes[key], term))
            self._active[person].append(term)
        try:
            current = {person}
            for step in kin.path:
                current = {y for x in sorted(current) for y in self.related(x, step)}
        finally:
            if indexed(term):
                self._active[person].remove(term)
        if kin.not_self:
            current.discard(person)
        if kin.gender:
            current = {y for y in sorted(current) if self.gender(y) == kin.gender}
        if indexed(term):
            self.derived[(person, term)] = set(current)
        return current

    def people(self, expr: Expr) -> set[str]:
        kind = expr[0]
        if kind == "name":
            return {expr[1]}
        if kind == "whose":
            return self.group(expr[1], expr[2])
        if kind == "rel":
            return {y for x in sorted(self.people(expr[2])) for y in self.related(x, expr[1])}
        raise ValueError(f"not a person expression: {expr!r}")


def indexed(term: str) -> bool:
    """True for a term worth a relation index: more than one step from a person (not "mother", "friend")."""
    kin = KIN[term]
    return len(kin.path) > 1 or any(step not in BASE_RELATIONS for step in kin.path)


def answer_for(question: str, k: PhantomKnowledge) -> str:
    """The answer the knowledge supports, or raise `PhantomPending` with the next need."""
    expr = parse_question(question)
    if expr is None:
        return UNKNOWN
    if any(t not in KIN for t in expr_terms(expr)):
        return UNKNOWN
    if expr[0] == "who":
        found = sorted(k.people(expr[1]))
    elif expr[0] == "attr":
        found = sorted({v for p in sorted(k.people(expr[2])) for v in k.values(p, expr[1])})
    else:
        found = [str(n) for n in sorted({len(k.related(p, expr[1])) for p in sorted(k.people(expr[2]))})]
    return ", ".join(found) if found else UNKNOWN


def next_action(need: PhantomNeed, k: PhantomKnowledge) -> str:
    """Read the document asked for, or a known hub of the need's person (or an index of its value)
    the first page did not make unnecessary, else the next result page of the need's query."""
    if need.kind == "read":
        return tool_call_text("read", id=need.anchor)
    hub = k.unread_hub(need)
    if hub is not None:
        return tool_call_text("read", id=hub)
    pages = k.pages.get(need.base_query, [])
    query = pages[0].query if pages and pages[0].query else need.query  # later pages of the same search
    return tool_call_text("search", query=query, page=max((e.page for e in pages), default=0) + 1)


def final_turn(messages: Sequence[Message]) -> bool:
    """True when the budget the prompt states leaves this turn as the last one."""
    budget = budget_from_prompt(messages)
    used = sum(1 for m in messages if m["role"] == "assistant")
    return budget is not None and used >= budget - 1


def reader_step(question: str, messages: Sequence[Message]) -> str:
    """The reader's next message for a PhantomWiki question."""
    k = PhantomKnowledge(transcript(messages), final=final_turn(messages))
    try:
        return tool_call_text("answer", text=answer_for(question, k))
    except PhantomPending as pending:
        return next_action(pending.need, k)


def reactive_answer(question: str, messages: Sequence[Message]) -> str:
    """The answer the retrieved text in `messages` supports, every unsettled need counted as exhausted."""
    try:
        return answer_for(question, PhantomKnowledge(transcript(messages), final=True))
    except PhantomPending:
        return UNKNOWN


class PhantomReader:
    """The scripted PhantomWiki reader as a policy `(messages, tools) -> assistant message`."""

    __name__ = "phantom_reader"

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        return reader_step(task_question(messages), messages)


__all__ = ["PhantomKnowledge", "PhantomNeed", "PhantomPending", "PhantomReader", "answer_for", "query_anchor",
           "reactive_answer"]
