"""A scripted JAM researcher: think-explore-reflect as a program over its own conversation.

Every round it re-reads the transcript (so it is stateless and works under
any memory window that keeps the request) and:

- thinks: the keys are the request's names, capitalised words other than
  question words ("Who works with Ada?" -> Ada; and, for a relation such as
  "X's mother", the person found to be that relative); its terms are the
  request's other content words. The candidates are files that mention a key
  (or, when the request names nobody, a term): README lines (`(source:
  <path>)` or a listed entry), search hits whose path or snippet does, and
  the provenance of a browsed memo;
- explores: up to `max_calls` calls a round: open the top folder and any
  folder whose name or README line names a key, search the request (and
  each new key; the next page while every hit names a key, up to
  `max_pages`), browse each candidate once with the request as query;
- reflects: the evidence is sufficient when nothing is left to explore;
  then it calls `finalize` with the evidence lines as context and the files
  they came from as sources. A line is evidence when it names a key, or
  shares a term with the request in a file about a key (its path or first
  line names one) or in any file when the request names nobody. A forced
  final turn finalizes what it has (best effort).

`compact=True` is the SFT teacher of a student that samples under the
tools' grammar (`models.constrained`, compact layout): each turn is a
sentence of that grammar, the calls one a line, the thought short and
without '<'; queries are the request's content words within 40 characters
(`MAX_STRING`), and `finalize` gets the best evidence sentence (trimmed to
160 characters from its key, `ARGUMENT_CAPS["context"]`) and at most 4
(`MAX_ITEMS`) sources, the
files with the strongest evidence (a memo only when its session is not
cited itself).

It never sees an answer; it is the baseline and teacher for the researcher.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import Stemmer

from librarian.models.base import Message, ToolSchema
from librarian.models.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from librarian.models.constrained import ARGUMENT_CAPS, FREE_TEXT_CHARS, MAX_ITEMS, MAX_STRING
from librarian.models.scripted.base import observation_text

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
_CAPITALISED = re.compile(r"\b[A-Z][\w'\u2019-]*")
_WORDS = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")
# words that are never keys or terms of a request: question words, auxiliaries, pronouns, fillers
_QUESTION_WORDS = frozenset(
    "according what which who whom whose where when why how is are was were be been do does did can could would "
    "should will shall may might must tell list show give find name summarize summarise describe explain please "
    "the a an in on at of for from with and or to by about into as i my me we our us you your it its this that "
    "these those there their they them he she his her him have has had much many any some all every each "
    "not no yes than then also just only get got".split())


def _possessive(name: str) -> str:
    return re.sub(r"['\u2019]s$", "", name)


def _stem(word: str) -> str:
    """A crude English stem, enough to match "works"/"work", "shipped"/"ship", "GPUs"/"gpu"."""
    word = _possessive(word.lower())
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if suffix in ("ing", "ed") and len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # shipped -> ship (but called -> call)
            break
    return word


def request_keys(request: str) -> list[str]:
    """The names a request asks about: runs of capitalised words, and capitalised words not question words."""
    keys = [_possessive(n) for n in _NAME_RE.findall(request)]
    covered = " ".join(keys).split()
    for m in _CAPITALISED.finditer(request):
        word = _possessive(m.group(0).strip("'\u2019-"))
        if len(word) >= 2 and word.lower() not in _QUESTION_WORDS and word not in covered:
            keys.append(word)
    return list(dict.fromkeys(keys))


def request_terms(request: str, keys: Sequence[str]) -> frozenset[str]:
    """Stems of the request's content words that are not part of a key."""
    in_keys = {_stem(w) for k in keys for w in _WORDS.findall(k)}
    words = (_stem(w) for w in _WORDS.findall(request) if len(w) >= 3 and w.lower() not in _QUESTION_WORDS)
    return frozenset(w for w in words if w not in in_keys)


@functools.lru_cache(maxsize=1024)
def _key_pattern(key: str) -> re.Pattern[str]:
    """A key as whole words (any ending), in running text or in a path ("Ada Lovelace" ~ "ada-lovelace")."""
    words = [re.escape(_stem(w)) + "(?:s|es|ed|ing)?" for w in key.split()]
    return re.compile(r"(?<![^\W_])" + r"[\s_-]+".join(words) + r"(?![^\W_])")


def request_of(messages: Sequence[Message]) -> str:
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    return re.sub(r"^\s*(Request|Question):\s*", "", first).strip()


def call_text(calls: list[tuple[str, dict]]) -> str:
    """The calls, one a line (the tool-call grammar puts a newline between two calls)."""
    return "\n".join(f"{TOOL_CALL_OPEN}{json.dumps({'name': n, 'arguments': a}, ensure_ascii=False)}{TOOL_CALL_CLOSE}"
                   for n, a in calls)


def clip_words(text: str, limit: int = MAX_STRING) -> str:
    """`text` as a string the compact grammar takes: one line, no '"' or '\\' (a capped string has no
    escapes), cut at a word boundary to at most `limit` characters."""
    text = " ".join(text.replace('"', "'").replace("\\", "/").split())
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0] if " " in text[: limit + 1] else text[:limit]
    return cut.rstrip(" ,;:-")


def short_query(request: str, keys: Sequence[str], limit: int = MAX_STRING) -> str:
    """The request as a query of at most `limit` characters: itself when short enough, else its content
    words in order (keys first when even those do not fit)."""
    flat = clip_words(request, len(request))
    if len(flat) <= limit:
        return flat
    words = [w for w in (x.strip("'\u2019") for x in re.findall(r"[^\s?!.,:;()]+", flat))
             if w and w.lower() not in _QUESTION_WORDS]
    if len(" ".join(words)) > limit:
        in_keys = {w for k in keys for w in k.split()}
        words = [*(w for k in keys for w in k.split()), *(w for w in words if _possessive(w) not in in_keys)]
    out: list[str] = []
    for w in words:
        if len(" ".join([*out, w])) <= limit and w not in out:
            out.append(w)
    return " ".join(out) or clip_words(flat, limit)


_RELATION = re.compile(rf"\b(?:{'|'.join(RELATIONS)})\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_SPEAKER = re.compile(r"^[A-Z][\w'\u2019 -]{0,40}: ")


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
    provenance: dict[str, list[str]] = field(default_factory=dict)  # a browsed file's sources
    terms: frozenset[str] = frozenset()
    asked: int = 0  # how many keys the request itself names (the rest were found as the relative)
    query: str = ""  # what it searches and browses for: the request, or its short form (compact)

    def names_key(self, text: str) -> bool:
        low = text.lower()
        return any(_key_pattern(k).search(low) for k in self.keys)

    def shares_terms(self, text: str) -> bool:
        return bool(self.terms) and any(_stem(w) in self.terms for w in _WORDS.findall(text))

    def matches(self, text: str) -> bool:
        """Names a key; or, for a request that names nobody, shares a term with it."""
        return self.names_key(text) if self.keys else self.shares_terms(text)

    def add(self, items: list, item: object) -> None:
        if item not in items:
            items.append(item)


def _parse(messages: Sequence[Message], compact: bool = False) -> _State:
    request = request_of(messages)
    keys = request_keys(request)
    rel = next((r for r in RELATIONS if re.search(rf"\b{r}\b", request, re.I)), None)
    st = _State(request, keys, rel, terms=request_terms(request, keys), asked=len(keys),
                query=short_query(request, keys) if compact else request)
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
            if st.matches(m[1] + " " + m[2]):
                st.add(st.folders, f"{base}/{m[1]}" if base else m[1])
        for line in part.splitlines():
            if st.matches(line):
                for src in _SOURCE.findall(line):
                    st.add(st.candidates, src)
        for m in _ENTRY.finditer(part):
            path = f"{base}/{m[1]}" if base else m[1]
            if (m[2] or m[3] == "directory") and (not base or st.matches(m[1])):
                st.add(st.folders, path)  # top-level folders always; deeper ones when they name a key
            elif m[3] != "directory" and st.matches(m[1]):
                st.add(st.candidates, path)
    elif part.startswith("search "):
        m = re.match(r'search "(.*)" page (\d+): (\d+) hits?(.*)', part)
        hits = _HIT.findall(part)
        matched = [h for h in hits if st.matches(h[1] + "\n" + h[2])]
        top = [h for h in hits[:2] if h not in matched] if m and m[2] == "1" else []  # a snippet is a file's start
        for kind, path, _snippet in matched + top:
            st.add(st.folders if kind == "directory" else st.candidates, path)
        if m and "more on page" in m[4] and hits and len(matched) == len(hits):
            st.add(st.more_pages, (m[1], int(m[2]) + 1))
    elif (b := _BROWSE.match(part)) is not None:
        path = b[1]
        lines = part.splitlines()[1:]
        prov = next((ln for ln in lines if ln.startswith("provenance: ")), None)
        if prov:
            st.provenance[path] = prov[len("provenance: "):].split(", ")
            for src in st.provenance[path]:
                st.add(st.candidates, src)
        numbered = [ln.split(": ", 1) for ln in lines if re.match(r"^\d+: ", ln)]
        about = not st.keys or st.names_key(path) or any(n == "1" and st.names_key(ln) for n, ln in numbered)
        hits = [ln for _, ln in numbered if st.names_key(ln) or (about and st.shares_terms(ln))]
        if hits:
            st.evidence.setdefault(path, []).extend(hits)
            if st.relation:  # the relative one asked about names (a name is capitalised)
                asked = st.keys[: st.asked]
                for speaker, x in (sx for ln in hits for sx in _sentences(ln)):
                    if speaker and not _speaks(speaker, asked) and not any(_key_pattern(k).search(x.lower())
                                                                            for k in asked):
                        continue  # someone else's relative
                    for name in re.findall(rf"\b(?i:{st.relation}) ({_NAME})", x):
                        if name not in st.keys:
                            st.keys.append(_possessive(name))


def _speaks(speaker: str, keys: Sequence[str]) -> bool:
    """Whether `speaker` (a full name, or a first name in a memo) is one of `keys`."""
    return any(speaker in (k, k.split()[0]) for k in keys)


_TERM = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")  # words, split at hyphens as a search analyzer splits them
_STOP = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then there "
                  "these they this to was will with".split())  # Lucene's English stop words


@functools.lru_cache(maxsize=1)
def _porter():  # noqa: ANN202 - a PyStemmer stemmer

    return Stemmer.Stemmer("porter")


@functools.lru_cache(maxsize=4096)
def _terms(text: str) -> frozenset[str]:
    """Porter stems of `text`'s words without stop words (lives ~ live), the terms an English search matches."""
    words = [_possessive(w.lower()) for w in _TERM.findall(text)]
    return frozenset(_porter().stemWords([w for w in words if w and w not in _STOP]))


def _sentences(line: str) -> list[tuple[str, str]]:
    """(speaker, sentence) of a line: a sentence opening with "Name: " sets the speaker of those after it."""
    out, speaker = [], ""
    for x in _SENTENCE.split(line.strip()):
        if m := _SPEAKER.match(x):
            speaker, x = m[0][:-2], x[m.end():]
        out.append((speaker, x))
    return out


class _Evidence:
    """The evidence by raw source: a memo and the session it came from are one source (`cite` names it
    by the session when that was browsed), ranked and mined for the sentence that answers."""

    def __init__(self, st: _State) -> None:
        self.st = st
        self.found = st.keys[st.asked:]  # the relatives found
        asked = _terms(" ".join(st.keys)) | _terms(" ".join(_QUESTION_WORDS))
        self.terms = _terms(st.request) - asked
        self.answer_terms = self.terms - (_terms(st.relation or "") if self.found else frozenset())
        self.groups: dict[str, list[str]] = {}
        for f in st.evidence:
            srcs = st.provenance.get(f, [])
            self.groups.setdefault(srcs[0] if len(srcs) == 1 else f, []).append(f)
        texts = {g: " ".join(ln for f in fs for ln in st.evidence[f]) for g, fs in self.groups.items()}
        seen: dict[str, int] = {}
        for text in texts.values():
            for t in _terms(text) - asked:
                seen[t] = seen.get(t, 0) + 1
        self.rare = {t for t, n in seen.items() if n == 1}
        self.rank = sorted(self.groups, key=lambda g: self.score(texts[g], self.terms), reverse=True)
        self.shared = {g: len(self.terms & _terms(text)) for g, text in texts.items()}  # e.g. the session's date

    def score(self, text: str, terms: frozenset[str]) -> tuple[int, ...]:
        """Names a key (or the request names nobody), names the relative found, terms shared, rare terms."""
        low, words = text.lower(), _terms(text)
        named = self.st.names_key(text) if self.st.keys else True
        found = any(_key_pattern(k).search(low) for k in self.found)
        return (int(named), int(found), len(terms & words), len(self.rare & words))

    def cite(self, limit: int = MAX_ITEMS) -> list[str]:
        """The `limit` strongest sources, each by its raw session when that was browsed, else by its file."""
        return [g if g in self.st.evidence else self.groups[g][0] for g in self.rank[:limit]]

    def sentence(self, limit: int = MAX_STRING) -> str:
        """The strongest sentence (with its speaker when only the speaker names a key), cut to `limit`
        characters from its key: it names a key (the relative found), shares terms, names nobody else, states
        no relation (when more is asked), is said by the one asked about, then its source's shared terms (a
        date), its rare terms, the rank."""
        best, top = "", None
        for rank, g in enumerate(self.rank):
            for f in self.groups[g]:
                for speaker, x in (sx for ln in dict.fromkeys(self.st.evidence[f]) for sx in _sentences(ln)):
                    named, found, _, rare = self.score(f"{speaker}: {x}", frozenset())
                    others = [n for n in _NAME_RE.findall(x) if not self.st.names_key(n)]
                    own = int(not others and speaker != "People")
                    spoken = int(_speaks(speaker, self.found or self.st.keys))
                    plain = int(not (self.answer_terms and _RELATION.search(x)))  # an attribute, not a relation
                    score = (named, found, len(self.answer_terms & _terms(x)), own, plain, spoken, self.shared[g], rare,
                             -rank)
                    if top is None or score > top:
                        best, top = (x if self.st.names_key(x) or not speaker else f"{speaker}: {x}"), score
        if not best:
            return "(nothing relevant found)"
        if len(best) > limit:
            low = best.lower()
            at = [m.start() for k in [*self.found, *self.st.keys] if (m := _key_pattern(k).search(low))]
            best = best[at[0]:] if at and len(best) - at[0] >= limit // 2 else best
            if len(best) > limit and ": " in best[:limit]:  # a long speaker: the first name says who
                who, rest = best.split(": ", 1)
                best = f"{who.split()[0]}: {rest}"
        return clip_words(best, limit)


@dataclass
class ScriptedResearcher:
    """The scripted researcher as a policy `(messages, tools) -> assistant message`.

    `compact`: every turn a sentence of the compact tool-call grammar (see the module docstring);
    `free_text`: a short thought comes before the calls."""

    max_calls: int = 4
    max_pages: int = 3
    compact: bool = False
    free_text: bool = True
    __name__ = "jam_researcher"

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        st = _parse(messages, self.compact)
        forced = bool(tools) and len(tools) == 1  # the loop's forced turn offers only finalize
        plan: list[tuple[str, dict]] = [] if forced else self._explore(st)
        if plan:
            return self._turn(f"Think: looking for {', '.join(st.keys) or 'the request'}; "
                              f"{len(st.candidates)} candidate(s).", plan)
        reflect = "Reflect: nothing left to explore." if not forced else "Reflect: out of rounds."
        sufficient = bool(st.evidence) and not forced
        if self.compact:
            ev = _Evidence(st)
            final = {"context": ev.sentence(ARGUMENT_CAPS["context"]), "sources": ev.cite(), "sufficient": sufficient}
        else:
            context = "\n".join(f"{p}: {ln}" for p, lines in st.evidence.items() for ln in dict.fromkeys(lines))
            final = {"context": context or "(nothing relevant found)", "sources": list(st.evidence),
                     "sufficient": sufficient}
        return self._turn(reflect, [("finalize", final)])

    def _turn(self, thought: str, calls: list[tuple[str, dict]]) -> str:
        """The thought (one the grammar allows: short, no '<') on its own line, then the calls."""
        if not self.free_text:
            return call_text(calls)
        return clip_words(thought.replace("<", " "), FREE_TEXT_CHARS - 1) + "\n" + call_text(calls)

    def _explore(self, st: _State) -> list[tuple[str, dict]]:
        plan: list[tuple[str, dict]] = []
        if "" not in st.opened:
            plan.append(("open", {"path": ""}))
        if (st.query, 1) not in st.searched:
            plan.append(("search", {"query": st.query, "page": 1}))
        for key in st.keys:
            key = clip_words(key) if self.compact else key
            if (key, 1) not in st.searched:
                plan.append(("search", {"query": key, "page": 1}))
        for query, page in st.more_pages:
            if page <= self.max_pages and (query, page) not in st.searched:
                plan.append(("search", {"query": query, "page": page}))
        plan += [("open", {"path": f}) for f in st.folders if f not in st.opened]
        plan += [("browse", {"path": c, "query": st.query}) for c in st.candidates if c not in st.browsed]
        unique = list({json.dumps(c, sort_keys=True): c for c in plan}.values())
        return unique[: self.max_calls]
