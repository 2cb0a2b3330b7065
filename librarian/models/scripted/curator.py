"""The scripted KBGym curator (paper 001's backward pass as a program).

Given the task of a backward pass (the question, how it went, the gold), it
names the keys the question's wording mentions and makes sure each has a
complete index document, one key at a time, using only the curator's tools:

1. page through `search(<key>)` until the results move past the key,
   collecting the facts that state a member (precision: a hit is linked only
   when its sentence states the key) and noticing an existing index for it;
2. read an existing index to see its links; unlink what does not belong;
3. build what is missing (`add` with the members as links), extend what is
   partial (`link_many` with the missing ones), change nothing when complete,
   and delete an index under which the store holds nothing;
4. `done` when every key is handled.

"An index points; it does not list": the index's text names only its key
("Residents of Port Avel", "People whose job is baker", or a person's name
for a hub of that person's facts); its members are its links. Like the
reader it rebuilds its state from its own transcript every turn, so it is
deterministic and never sees the universe graph.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted.base import task_question, tool_call_text
from librarian.models.scripted.kbgym import Event, Expr, StatedFact, parse_fact, parse_question, transcript
from librarian.models.scripted.phantom import event_texts, is_phantom_question, reads_as_phantom
from librarian.models.scripted.phantom_curator import next_edit as phantom_edit

MAX_LINKS_PER_CALL = 40
MAX_PAGES = 10
TITLES = {"city": "Residents of {v}", "job": "People whose job is {v}", "hobby": "People whose hobby is {v}",
          "person": "{v}"}


@dataclass(frozen=True, slots=True)
class IndexKey:
    """A key to index: an attribute value (everyone with it) or a person (a hub of their facts)."""

    attr: str  # city | job | hobby | person
    anchor: str

    @property
    def title(self) -> str:
        return TITLES[self.attr].format(v=self.anchor)

    @property
    def query(self) -> str:
        """The key itself: its facts and any index naming it rank first (an index is the shortest)."""
        return self.anchor

    def is_member(self, f: StatedFact) -> bool:
        if self.attr == "person":
            return f.subj == self.anchor
        return f.rel == self.attr and f.obj.lower() == self.anchor.lower()

    def names(self, text: str) -> bool:
        return self.anchor.lower() in text.lower()

    def is_index(self, text: str) -> bool:
        """True when a non-fact document is an index for this key (a hub must be exactly the name)."""
        if parse_fact(text) is not None:
            return False
        if self.attr == "person":
            return _norm(text) == _norm(self.anchor)
        return self.names(text)


def _norm(text: str) -> str:
    return re.sub(r"[^\w\s-]", "", " ".join(text.split())).lower()


def question_keys(question: str) -> list[IndexKey]:
    """The keys a question's wording names: attribute values first (the larger sets), then people."""
    plan = parse_question(question)
    if plan is None:
        return []
    groups: list[IndexKey] = []
    people: list[IndexKey] = []

    def walk(e: Expr) -> None:
        kind = e[0]
        if kind == "person":
            people.append(IndexKey("person", e[1]))
        elif kind == "group" and e[1] in ("city", "job", "hobby"):
            groups.append(IndexKey(e[1], e[2]))
        elif kind == "filter":
            walk(e[1])
            groups.append(IndexKey(e[2], e[3]))
        else:
            for part in e[1:]:
                if isinstance(part, tuple):
                    walk(part)

    walk(plan.expr)
    return list(dict.fromkeys(groups + people))


_CREATED = re.compile(r"(?:added|near-duplicate of) '([^']+)'")


@dataclass
class KeyState:
    """What the transcript shows about one key."""

    members: list[str]  # ids of facts stating a member, in the order found
    exhausted: bool
    next_page: int
    index_id: str | None
    index_read: bool
    links: list[str]
    wrong: list[str]  # linked ids that do not state a member
    gave_up: bool  # an edit for this key was rejected: move on
    created: bool  # this pass added the index (its links are known without reading it)


def key_state(key: IndexKey, events: Sequence[Event]) -> KeyState:
    pages = [e for e in events if e.name == "search" and e.query == key.query and not e.error]
    members: list[str] = []
    index_id: str | None = None
    exhausted = False
    for e in sorted(pages, key=lambda e: e.page):
        for h in e.hits:
            f = h.fact
            if f is not None and key.is_member(f) and h.id not in members:
                members.append(h.id)
            elif f is None and index_id is None and h.kind != "raw" and key.is_index(h.text):
                index_id = h.id
        # completeness is a promise: page on until no hit names the key at all
        if not e.has_more or e.page >= MAX_PAGES or not any(key.names(h.text) for h in e.hits):
            exhausted = True
    links: list[str] = []
    wrong: list[str] = []
    read = False
    gave_up = False
    created = False
    for e in events:
        if e.name == "add" and _norm(str(e.arguments.get("text", ""))) == _norm(key.title):
            if e.error:
                gave_up = True
            elif m := _CREATED.search(e.observation):
                index_id, created = m.group(1), True
                links = list(dict.fromkeys([*links, *e.arguments.get("links", [])]))
        elif index_id is None:
            continue
        elif e.name == "read" and e.read_id == index_id and not e.error:
            read = True
            links = list(e.read_links)
            wrong = [x.id for x in e.linked if (f := parse_fact(x.text)) is None or not key.is_member(f)]
        elif e.name == "link_many" and e.arguments.get("source") == index_id:
            gave_up |= e.error
            if not e.error:
                links += [t for t in e.arguments.get("targets", []) if t not in links]
        elif e.name == "unlink" and e.arguments.get("source") == index_id:
            gave_up |= e.error
            target = e.arguments.get("target")
            if target in wrong:
                wrong.remove(target)
            if target in links:
                links.remove(target)
        elif e.name == "delete" and e.arguments.get("id") == index_id:
            gave_up = True  # deleted (or could not be): nothing more to do for this key
    next_page = max((e.page for e in pages), default=0) + 1
    return KeyState(members, exhausted, next_page, index_id, read, links, wrong, gave_up, created)


def next_edit(key: IndexKey, s: KeyState) -> str | None:
    """The next call for this key, or None when the key is complete (or abandoned)."""
    if s.gave_up:
        return None
    if not s.exhausted:
        return tool_call_text("search", query=key.query, page=s.next_page)
    if s.index_id is not None and not s.index_read and not s.created:
        return tool_call_text("read", id=s.index_id)
    if s.wrong:
        return tool_call_text("unlink", source=s.index_id, target=s.wrong[0])
    if not s.members:
        return tool_call_text("delete", id=s.index_id) if s.index_id is not None else None
    if s.index_id is None:
        return tool_call_text("add", text=key.title, links=s.members[:MAX_LINKS_PER_CALL])
    missing = [m for m in s.members if m not in s.links]
    if missing:
        return tool_call_text("link_many", source=s.index_id, targets=missing[:MAX_LINKS_PER_CALL])
    return None


class KBGymCurator:
    """The scripted curator as a policy `(messages, tools) -> assistant message`."""

    __name__ = "kbgym_curator"

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        question = task_question(messages)
        events = transcript(messages)
        if is_phantom_question(question) and reads_as_phantom(question, event_texts(events)):  # PhantomWiki

            return phantom_edit(question, messages)
        for key in question_keys(question):
            call = next_edit(key, key_state(key, events))
            if call is not None:
                return call
        return tool_call_text("done")


__all__ = ["IndexKey", "KBGymCurator", "KeyState", "key_state", "next_edit", "question_keys"]
