"""A scripted JAM researcher: think-explore-reflect as a program over its own conversation.

Every round it re-reads the transcript (so it is stateless and works under
any memory window that keeps the request) and:

- thinks: the keys are the request's names (and, for a relation such as
  "X's mother", the person found to be that relative); the candidates are
  files that mention a key: README lines (`(source: <path>)` or a listed
  entry), search hits whose snippet names a key, and the provenance of a
  browsed memo;
- explores: up to `max_calls` calls a round: open the top folder and any
  folder whose name or README line names a key, search the request (and
  each new key; the next page while every hit names a key, up to
  `max_pages`), browse each candidate once with the request as query;
- reflects: the evidence is sufficient when nothing is left to explore;
  then it calls `finalize` with the evidence lines (those naming a key) as
  context and the files they came from as sources. A forced final turn
  finalizes what it has (best effort).

It never sees an answer; it is the baseline and teacher for the researcher.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from librarian.models.base import Message, ToolSchema
from librarian.models.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from librarian.models.scripted import observation_text

RELATIONS = ("mother", "father", "spouse", "friend", "sister", "brother", "son", "daughter", "wife", "husband")
_NAME = r"[A-Z][a-z'-]+(?: [A-Z][a-z'-]+)+"
_NAME_RE = re.compile(_NAME)
_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*(?:</tool_call>|$)", re.S)
_PART = re.compile(r"\n\n(?=\[\d+\] )")
_HIT = re.compile(r"^\d+\. id=\S+\s+\[(\w+)\] (.+?)\n\s+(.*)$", re.M)  # paths may hold spaces
_BROWSE = re.compile(r'^browse (.+?) for ".*?": ')
_ENTRY = re.compile(r"^  (.+?)(/?)  (raw|synthetic|directory)  ", re.M)
_SOURCE = re.compile(r"\(source: (.+?)\)")
_README_DIR = re.compile(r"^- (.+?)/: (.*)$", re.M)


def _possessive(name: str) -> str:
    return re.sub(r"'s$", "", name)


def request_of(messages: Sequence[Message]) -> str:
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    return re.sub(r"^\s*(Request|Question):\s*", "", first).strip()


def call_text(calls: list[tuple[str, dict]]) -> str:
    return "".join(f"{TOOL_CALL_OPEN}{json.dumps({'name': n, 'arguments': a}, ensure_ascii=False)}{TOOL_CALL_CLOSE}"
                   for n, a in calls)


@dataclass
class _State:
    request: str
    keys: list[str]
    relation: str | None
    opened: set[str] = field(default_factory=set)
    searched: set[tuple[str, int]] = field(default_factory=set)
    browsed: set[str] = field(default_factory=set)
    folders: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    more_pages: list[tuple[str, int]] = field(default_factory=list)
    evidence: dict[str, list[str]] = field(default_factory=dict)

    def names_key(self, text: str) -> bool:
        low = text.lower()
        return any(k.lower() in low or k.lower().replace(" ", "-") in low for k in self.keys)

    def add(self, items: list, item: object) -> None:
        if item not in items:
            items.append(item)


def _parse(messages: Sequence[Message]) -> _State:
    request = request_of(messages)
    keys = [_possessive(n) for n in _NAME_RE.findall(request)]
    rel = next((r for r in RELATIONS if re.search(rf"\b{r}\b", request, re.I)), None)
    st = _State(request, list(dict.fromkeys(keys)), rel)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        calls = []
        for blob in _CALL.findall(m["content"]):
            try:
                c = json.loads(blob)
                calls.append((c["name"], c.get("arguments", {})))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        for name, a in calls:
            if name == "open":
                st.opened.add(a.get("path", ""))
            elif name == "search":
                st.searched.add((a.get("query", ""), a.get("page", 1)))
            elif name == "browse":
                st.browsed.add(a.get("path", ""))
        if i + 1 < len(messages) and messages[i + 1]["role"] != "assistant":
            obs = observation_text(messages[i + 1])
            for part in _PART.split(obs):
                _mine(st, re.sub(r"^\[\d+\] ", "", part), calls)
    return st


def _mine(st: _State, part: str, calls: list[tuple[str, dict]]) -> None:
    """Folders, candidates, pages and evidence named by one tool result."""
    if part.startswith("README of "):
        where = part[len("README of "):part.index(":")]
        base = "" if where == "/" else where
        for m in _README_DIR.finditer(part):
            if st.names_key(m[1] + " " + m[2]):
                st.add(st.folders, f"{base}/{m[1]}" if base else m[1])
        for line in part.splitlines():
            if st.names_key(line):
                for src in _SOURCE.findall(line):
                    st.add(st.candidates, src)
        for m in _ENTRY.finditer(part):
            path = f"{base}/{m[1]}" if base else m[1]
            if (m[2] or m[3] == "directory") and (not base or st.names_key(m[1])):
                st.add(st.folders, path)  # top-level folders always; deeper ones when they name a key
            elif m[3] != "directory" and st.names_key(m[1]):
                st.add(st.candidates, path)
    elif part.startswith("search "):
        m = re.match(r'search "(.*)" page (\d+): (\d+) hits?(.*)', part)
        hits = _HIT.findall(part)
        matched = [h for h in hits if st.names_key(h[2])]
        for kind, path, _snippet in (matched or hits[:2]):
            st.add(st.folders if kind == "directory" else st.candidates, path)
        if m and "more on page" in m[4] and hits and len(matched) == len(hits):
            st.add(st.more_pages, (m[1], int(m[2]) + 1))
    elif (b := _BROWSE.match(part)) is not None:
        path = b[1]
        lines = part.splitlines()[1:]
        prov = next((ln for ln in lines if ln.startswith("provenance: ")), None)
        if prov:
            for src in prov[len("provenance: "):].split(", "):
                st.add(st.candidates, src)
        found = [ln.split(": ", 1)[1] for ln in lines if re.match(r"^\d+: ", ln)]
        hits = [ln for ln in found if st.names_key(ln)]
        if hits:
            st.evidence.setdefault(path, []).extend(hits)
            if st.relation:
                for ln in hits:
                    for name in re.findall(rf"\b{st.relation} ({_NAME})", ln, re.I):
                        if name not in st.keys:
                            st.keys.append(_possessive(name))


@dataclass
class ScriptedResearcher:
    """The scripted researcher as a policy `(messages, tools) -> assistant message`."""

    max_calls: int = 4
    max_pages: int = 3
    __name__ = "jam_researcher"

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        st = _parse(messages)
        forced = bool(tools) and len(tools) == 1  # the loop's forced turn offers only finalize
        plan: list[tuple[str, dict]] = [] if forced else self._explore(st)
        if plan:
            think = f"Think: looking for {', '.join(st.keys) or 'the request'}; {len(st.candidates)} candidate(s)."
            return think + "\n" + call_text(plan)
        context = "\n".join(f"{p}: {ln}" for p, lines in st.evidence.items() for ln in dict.fromkeys(lines))
        reflect = "Reflect: nothing left to explore." if not forced else "Reflect: out of rounds."
        return reflect + "\n" + call_text([("finalize", {"context": context or "(nothing relevant found)",
                                                        "sources": list(st.evidence),
                                                        "sufficient": bool(st.evidence) and not forced})])

    def _explore(self, st: _State) -> list[tuple[str, dict]]:
        plan: list[tuple[str, dict]] = []
        if "" not in st.opened:
            plan.append(("open", {"path": ""}))
        if (st.request, 1) not in st.searched:
            plan.append(("search", {"query": st.request, "page": 1}))
        for key in st.keys:
            if (key, 1) not in st.searched:
                plan.append(("search", {"query": key, "page": 1}))
        for query, page in st.more_pages:
            if page <= self.max_pages and (query, page) not in st.searched:
                plan.append(("search", {"query": query, "page": page}))
        plan += [("open", {"path": f}) for f in st.folders if f not in st.opened]
        plan += [("browse", {"path": c, "query": st.request}) for c in st.candidates if c not in st.browsed]
        unique = list({json.dumps(c, sort_keys=True): c for c in plan}.values())
        return unique[: self.max_calls]
