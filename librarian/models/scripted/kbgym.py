"""What the scripted KBGym policies read: question wording, fact sentences, and their own transcript.

Everything here parses text a model would see. A question's wording becomes
a small plan (`QuestionPlan`: what to compute over which sets); a fact sentence
becomes a `StatedFact`; the conversation becomes the list of calls made so far
with their parsed observations (`transcript`). Nothing here sees a gold
answer or the universe graph.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from librarian.models.base import Message
from librarian.models.scripted.base import observation_text

SINGLE_RELATIONS = ("mother", "father", "spouse")
SET_RELATIONS = ("child", "sibling", "friend")
ATTRIBUTES = ("job", "hobby", "city", "birthdate")

# ---- facts ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatedFact:
    """(subject, relation, object) as stated by one atomic sentence."""

    subj: str
    rel: str
    obj: str


_FACT_RES = (
    re.compile(r"^(?P<s>.+?)'s (?P<r>job|hobby|mother|father|child|sibling|spouse|friend) is (?P<o>.+?)\.?$"),
    re.compile(r"^(?P<s>.+?) (?P<r>lives) in (?P<o>.+?)\.?$"),
    re.compile(r"^(?P<s>.+?) was (?P<r>born) on (?P<o>\d{4}-\d{2}-\d{2})\.?$"),
)
_REL_ALIAS = {"lives": "city", "born": "birthdate"}


# the content executor's `<source path>: ` before a sentence: anything up to ": " that holds no sentence break
_CITATION = re.compile(r"^(?:(?![.!?]\s)[^:\n])+: (?=\S)")
_SENTENCE_BREAK = re.compile(r"[.!?]\s+\S")


def parse_fact(text: str) -> StatedFact | None:
    """The fact one sentence states, or None when the text is not a fact sentence (an index, a note).

    A leading `<path>: ` citation (as the extractive content executor writes a source's line) is skipped;
    text holding more than one sentence is not a fact sentence.
    """
    line = " ".join(text.split())
    while (m := _CITATION.match(line)) is not None:
        line = line[m.end():]
    if _SENTENCE_BREAK.search(line):
        return None
    for pattern in _FACT_RES:
        m = pattern.match(line)
        if m:
            return StatedFact(m["s"], _REL_ALIAS.get(m["r"], m["r"]), m["o"])
    return None


# ---- the question as a plan ----------------------------------------------------------------

# Expressions are nested tuples:
#   ("person", name)                      a named person
#   ("rel", person_expr, rel)             the one person related by mother / father / spouse
#   ("attr", person_expr, attr)           a value: job, hobby, city, birthdate
#   ("group", attr, value)                everyone whose attr is value
#   ("members", person_expr, rel)         everyone related by child / sibling / friend
#   ("members_of", set_expr, rel)         the union of members over a set (grandchildren)
#   ("filter", set_expr, attr, value)     the members of a set whose attr is value
#   ("and", set_expr, set_expr)           intersection
Expr = tuple


@dataclass(frozen=True, slots=True)
class QuestionPlan:
    """What the question asks: `op` over `expr` (value, name, list, count, oldest, youngest)."""

    op: str
    expr: Expr
    question: str = ""
    keys: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.keys:
            object.__setattr__(self, "keys", tuple(dict.fromkeys(expr_keys(self.expr))))


_ATTR_NOUN = {"job": "job", "hobby": "hobby", "city": "city"}
_COND = r"(lives in|has the job|has the hobby) (.+?)"
_COND_ATTR = {"lives in": "city", "has the job": "job", "has the hobby": "hobby"}
_REL = r"(mother|father|spouse)"


def _p(name: str) -> Expr:
    return ("person", name.strip())


def _rules() -> list[tuple[re.Pattern[str], object]]:
    r = [
        (r"What is the (job|hobby) of the (\w+) of (.+)'s (\w+)\?", lambda m: QuestionPlan(
            "value", ("attr", ("rel", ("rel", _p(m[3]), m[4]), m[2]), m[1]))),
        (r"What is the (job|hobby) of (.+)'s " + _REL + r"\?", lambda m: QuestionPlan(
            "value", ("attr", ("rel", _p(m[2]), m[3]), m[1]))),
        (r"Which city does (.+)'s " + _REL + r" live in\?", lambda m: QuestionPlan(
            "value", ("attr", ("rel", _p(m[1]), m[2]), "city"))),
        (r"Who is the " + _REL + r" of (.+)'s " + _REL + r"\?", lambda m: QuestionPlan(
            "name", ("rel", ("rel", _p(m[2]), m[3]), m[1]))),
        (r"What is (.+)'s (job|hobby)\?", lambda m: QuestionPlan("value", ("attr", _p(m[1]), m[2]))),
        (r"Which city does (.+) live in\?", lambda m: QuestionPlan("value", ("attr", _p(m[1]), "city"))),
        (r"How many people live in (.+)\?", lambda m: QuestionPlan("count", ("group", "city", m[1]))),
        (r"How many people have the job (.+)\?", lambda m: QuestionPlan("count", ("group", "job", m[1]))),
        (r"How many friends does (.+) have\?", lambda m: QuestionPlan("count", ("members", _p(m[1]), "friend"))),
        (r"How many grandchildren does (.+) have\?", lambda m: QuestionPlan(
            "count", ("members_of", ("members", _p(m[1]), "child"), "child"))),
        (r"How many people living in (.+) have the hobby (.+)\?", lambda m: QuestionPlan(
            "count", ("and", ("group", "city", m[1]), ("group", "hobby", m[2])))),
        (r"Who is (.+)'s oldest friend\?", lambda m: QuestionPlan("oldest", ("members", _p(m[1]), "friend"))),
        (r"Who is (.+)'s " + _REL + r"\?", lambda m: QuestionPlan("name", ("rel", _p(m[1]), m[2]))),
        (r"Who is a friend of both (.+) and (.+)\?", lambda m: QuestionPlan(
            "list", ("and", ("members", _p(m[1]), "friend"), ("members", _p(m[2]), "friend")))),
        (r"Which of (.+)'s friends live in (.+)\?", lambda m: QuestionPlan(
            "list", ("filter", ("members", _p(m[1]), "friend"), "city", m[2]))),
        (r"Which of (.+)'s friends have the job (.+)\?", lambda m: QuestionPlan(
            "list", ("filter", ("members", _p(m[1]), "friend"), "job", m[2]))),
        (r"Which child of (.+) has the job (.+)\?", lambda m: QuestionPlan(
            "list", ("filter", ("members", _p(m[1]), "child"), "job", m[2]))),
        (r"Who is the oldest person living in (.+)\?", lambda m: QuestionPlan("oldest", ("group", "city", m[1]))),
        (r"Who is the youngest person with the job (.+)\?", lambda m: QuestionPlan("youngest", ("group", "job", m[1]))),
        (r"Who was born on (\d{4}-\d{2}-\d{2})\?", lambda m: QuestionPlan("list", ("group", "birthdate", m[1]))),
        (r"Who " + _COND + " and " + _COND + r"\?", lambda m: QuestionPlan(
            "list", ("and", ("group", _COND_ATTR[m[1]], m[2]), ("group", _COND_ATTR[m[3]], m[4])))),
    ]
    return [(re.compile("^" + pattern + "$"), build) for pattern, build in r]


_RULES = _rules()


def parse_question(question: str) -> QuestionPlan | None:
    """The plan for a KBGym question's wording, or None when the wording is not understood."""
    text = " ".join(question.split())
    for pattern, build in _RULES:
        m = pattern.match(text)
        if m:
            plan = build(m)  # type: ignore[operator]
            return QuestionPlan(plan.op, plan.expr, text)
    return None


def expr_keys(expr: Expr) -> list[str]:
    """The keys an expression names, in order: person:..., city:..., job:..., hobby:..., relation:..."""
    kind = expr[0]
    if kind == "person":
        return [f"person:{expr[1]}"]
    if kind in ("rel", "members"):
        return expr_keys(expr[1]) + [f"relation:{expr[2]}"]
    if kind == "attr":
        return expr_keys(expr[1])
    if kind == "group":
        return [f"{expr[1]}:{expr[2]}"] if expr[1] != "birthdate" else [f"date:{expr[2]}"]
    if kind == "members_of":
        return expr_keys(expr[1]) + [f"relation:{expr[2]}"]
    if kind == "filter":
        return expr_keys(expr[1]) + [f"{expr[2]}:{expr[3]}"]
    if kind == "and":
        return expr_keys(expr[1]) + expr_keys(expr[2])
    raise ValueError(f"unknown expression {expr!r}")


# ---- the transcript: calls and parsed observations -----------------------------------------


@dataclass(frozen=True, slots=True)
class SearchHit:
    id: str
    kind: str
    path: str
    text: str

    @property
    def fact(self) -> StatedFact | None:
        return parse_fact(self.text)


@dataclass(frozen=True, slots=True)
class Linked:
    id: str
    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class Event:
    """One call the policy made and what came back (parsed where the observation has a known shape)."""

    name: str
    arguments: dict
    observation: str
    hits: tuple[SearchHit, ...] = ()
    has_more: bool = False
    read_id: str | None = None
    read_kind: str = ""  # the read node's kind (raw | synthetic | directory)
    read_text: str = ""
    read_links: tuple[str, ...] = ()
    linked: tuple[Linked, ...] = ()
    error: bool = False

    @property
    def query(self) -> str | None:
        return self.arguments.get("query") if self.name == "search" else None

    @property
    def page(self) -> int:
        return int(self.arguments.get("page", 1)) if self.name == "search" else 0


_CALL = re.compile(r"<tool_call>\s*(\{.*\})\s*(?:</tool_call>)?", re.S)
_HIT = re.compile(r"^(\d+)\. id=(\S+)\s+\[(\w+)\] (.*)$")
_HEADER = re.compile(r"^\[(\w+)\] (.*?)\s+id=(\S+)")
_LINKED = re.compile(r"^=== (?:linked|source): \[(\w+)\] (.*?)\s+id=(\S+) ===$")  # a linked node, or a raw source


def _call(text: str) -> tuple[str, dict]:
    m = _CALL.search(text)
    if not m:
        return "", {}
    try:
        data = json.loads(m.group(1))
    except json.JSONDecodeError:
        return "", {}
    if not isinstance(data, dict) or not isinstance(data.get("arguments", {}), dict):
        return "", {}
    return str(data.get("name", "")), dict(data.get("arguments", {}))


def parse_search(observation: str) -> tuple[tuple[SearchHit, ...], bool]:
    """The hits of a `search` observation and whether a next page exists."""
    lines = observation.splitlines()
    hits: list[SearchHit] = []
    for i, line in enumerate(lines):
        m = _HIT.match(line)
        if m:
            text = lines[i + 1].strip() if i + 1 < len(lines) else ""
            hits.append(SearchHit(m[2], m[3], m[4].strip(), text))
    has_more = bool(lines) and "(more on page" in lines[0]
    return tuple(hits), has_more


def parse_read(observation: str) -> tuple[str | None, str, tuple[str, ...], tuple[Linked, ...]]:
    """(id, text, link ids, linked documents) of a KBGym `read` observation; the raw sources a read shows with
    `read_sources` (`=== source: ... ===`) come last among the linked documents."""
    lines = observation.splitlines()
    if not lines or not (m := _HEADER.match(lines[0])):
        return None, "", (), ()
    node_id = m[3]
    links: tuple[str, ...] = ()
    i = 1
    while i < len(lines) and lines[i] != "---":
        if lines[i].startswith("links: "):
            links = tuple(x.strip() for x in lines[i][7:].split(",") if x.strip())
        i += 1
    body: list[str] = []
    linked: list[Linked] = []
    current: tuple[str, str] | None = None
    chunk: list[str] = []
    for line in lines[i + 1:]:
        lm = _LINKED.match(line)
        if lm:
            if current is not None:
                linked.append(Linked(current[0], current[1], "\n".join(chunk).strip()))
            current, chunk = (lm[3], lm[1]), []
        elif current is None:
            body.append(line)
        else:
            chunk.append(line)
    if current is not None:
        linked.append(Linked(current[0], current[1], "\n".join(chunk).strip()))
    return node_id, "\n".join(body).strip(), links, tuple(linked)


def transcript(messages: Sequence[Message]) -> list[Event]:
    """The policy's calls so far (as visible in `messages`) paired with their observations."""
    events: list[Event] = []
    pending: tuple[str, dict] | None = None
    for m in messages:
        if m["role"] == "assistant":
            pending = _call(m["content"])
        elif pending is not None and (m["role"] == "tool" or "<tool_response>" in m["content"]):
            obs = observation_text(m)
            name, args = pending
            pending = None
            if obs.startswith("error"):
                events.append(Event(name, args, obs, error=True))
            elif name == "search":
                hits, more = parse_search(obs)
                events.append(Event(name, args, obs, hits=hits, has_more=more))
            elif name == "read":
                rid, text, links, linked = parse_read(obs)
                header = _HEADER.match(obs)
                events.append(Event(name, args, obs, read_id=rid, read_kind=header[1] if header else "",
                                    read_text=text, read_links=links, linked=linked))
            else:
                events.append(Event(name, args, obs))
    return events


def budget_from_prompt(messages: Sequence[Message]) -> int | None:
    """The action budget the system prompt states ("You have N actions"), if any."""
    for m in messages:
        if m["role"] == "system":
            found = re.search(r"You have (\d+) actions", m["content"])
            return int(found.group(1)) if found else None
    return None
