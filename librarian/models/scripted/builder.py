"""A heuristic Librarian builder (paper 000's baseline shape): cluster by topic, consolidate, nest, stop.

From its own transcript each turn, deterministically:
1. `list` the top folder and the folders under it (breadth first);
2. `read` raw files, up to half the budget (a file whose name already
   states a fact sentence, `<id> <sentence>`, needs no read);
3. when what it knows parses as KBGym fact sentences and some attribute
   value (a city, job or hobby) is shared by 3+ people, it builds key
   indexes instead of topics (`key_indexes`), largest first, 3 actions
   each while the budget lasts: `create_file index/<key>.md` (a title line
   and every known city / birthdate / job / hobby sentence of the members,
   one per line), `create_file index/<key>-one.md` (one member's sentence),
   and `merge_files` of the two under `index/<key>` whose text names the key
   ("Residents of Port Avel"): a reader who searches the key finds the
   index, one read returns every member with their attributes, and the
   linked single sentence marks the index as complete for the scripted
   KBGym reader; then `stop`;
4. otherwise it clusters what it read by topic: each document goes to its most widely
   shared salient word (ignoring stop words and words every document has);
   `create_file` one `topics/<word>.md` per cluster of two or more, its text
   an extractive digest (each source's path and first line) and its sources
   the cluster's documents (provenance);
   `merge_files` the topic files under one `topics` summary listing them;
   `stop`.

It never sees the hidden questions: only its listings and the documents it read.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted.base import tool_call_text
from librarian.models.scripted.kbgym import StatedFact, budget_from_prompt, parse_fact, transcript

STOP_WORDS = frozenset(
    "the and for with that this from have has had was were are is its his her their they them then than "
    "what when where which who whom will would could should about into over under after before also been "
    "being more most some such only other very just your yours ours there here each every does done".split())
_ENTRY = re.compile(r"^  (\S.*?)(/?)  (raw|synthetic|directory)  ")
_READ_HEADER = re.compile(r"^\[(\w+)\] (.*?)\s+id=\S+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")


def _words(text: str) -> set[str]:
    return {w.lower().strip("'-") for w in _WORD.findall(text)} - STOP_WORDS


def _slug(word: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", word.lower()).strip("-") or "topic"


def clusters(docs: dict[str, str], max_share: float = 0.5) -> dict[str, list[str]]:
    """Topic word -> paths of the documents whose most widely shared salient word it is (clusters of 2+)."""
    words = {p: _words(t) for p, t in docs.items()}
    df = Counter(w for ws in words.values() for w in ws)
    cap = max(2, int(len(docs) * max_share))
    out: dict[str, list[str]] = {}
    for path in sorted(docs):
        shared = [w for w in words[path] if 2 <= df[w] <= cap]
        if shared:
            best = max(shared, key=lambda w: (df[w], w))
            out.setdefault(best, []).append(path)
    return {w: ps for w, ps in sorted(out.items()) if len(ps) >= 2}


INDEX_ATTRS = ("city", "job", "hobby")  # group keys, in priority order on ties
MEMBER_ATTRS = ("birthdate",)  # what an index line says about each member besides the key
INDEX_TITLES = {"city": "Residents of {v}", "job": "People whose job is {v}", "hobby": "People whose hobby is {v}"}
MIN_MEMBERS = 3


def fact_sentence(f: StatedFact) -> str:
    """The KBGym sentence stating `f` (the wording `scripted.kbgym.parse_fact` reads back)."""
    if f.rel == "city":
        return f"{f.subj} lives in {f.obj}."
    if f.rel == "birthdate":
        return f"{f.subj} was born on {f.obj}."
    return f"{f.subj}'s {f.rel} is {f.obj}."


def name_fact(path: str) -> StatedFact | None:
    """The fact a file name states (`<id> <sentence>`, as `make_corpora(path_style="sentence"|"top")` names them)."""
    name = path.rsplit("/", 1)[-1]
    if " " not in name:
        return None
    return parse_fact(name.split(" ", 1)[1])


@dataclass(frozen=True, slots=True)
class KeyIndex:
    """One index to build: an attribute value, its members' sentences (with their paths) and one member's."""

    attr: str
    value: str
    members: int
    lines: tuple[tuple[str, str], ...]  # (path, sentence), the title excluded
    one: tuple[str, str]  # (path, sentence) of one member's fact for this key

    @property
    def slug(self) -> str:
        return f"{self.attr}-{_slug(self.value)}"

    @property
    def title(self) -> str:
        return INDEX_TITLES[self.attr].format(v=self.value)

    @property
    def text(self) -> str:
        return "\n".join([self.title + ":"] + [s for _, s in self.lines])


def key_indexes(facts: dict[str, StatedFact], min_members: int = MIN_MEMBERS,
                member_attrs: tuple[str, ...] = MEMBER_ATTRS) -> list[KeyIndex]:
    """Indexes of the attribute values shared by `min_members`+ people, largest first (then city, job, hobby)."""
    by_subject: dict[str, dict[str, tuple[str, StatedFact]]] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for path in sorted(facts):
        f = facts[path]
        if f.rel in INDEX_ATTRS or f.rel in member_attrs:
            by_subject.setdefault(f.subj, {}).setdefault(f.rel, (path, f))
        if f.rel in INDEX_ATTRS:
            members = groups.setdefault((f.rel, f.obj), [])
            if f.subj not in members:
                members.append(f.subj)
    out = []
    for (attr, value), members in groups.items():
        if len(members) < min_members:
            continue
        members = sorted(members)
        lines = [(p, fact_sentence(f)) for m in members for a in (attr, *member_attrs)
                 if (pf := by_subject[m].get(a)) is not None for p, f in [pf]]
        own = by_subject[members[0]][attr]
        out.append(KeyIndex(attr, value, len(members), tuple(lines), (own[0], fact_sentence(own[1]))))
    out.sort(key=lambda k: (-k.members, INDEX_ATTRS.index(k.attr), k.value))
    return out


def index_action(keys: list[KeyIndex], attempted: set[str], everything: list, left: int) -> str | None:
    """The next call of the key-index plan (3 actions a key, one kept for `stop`), or None when done."""
    for k in keys:
        full, one, parent = f"index/{k.slug}.md", f"index/{k.slug}-one.md", f"index/{k.slug}"
        merged = any(e.name == "merge_files" and e.arguments.get("path") == parent for e in everything)
        if merged:
            continue
        if full not in attempted:
            if left < 4:
                return None
            return tool_call_text("create_file", path=full, text=k.text, sources=[p for p, _ in k.lines])
        if one not in attempted:
            return tool_call_text("create_file", path=one, text=k.one[1], sources=[k.one[0]])
        return tool_call_text("merge_files", path=parent, children=[full, one], text=k.title)
    return None


COMPACT_ITEMS = 4  # sources / children a call carries in the compact layout (`models.constrained.MAX_ITEMS`)
INSTRUCTION_CHARS = 40  # `models.constrained.MAX_STRING`


def compact_plan(k: KeyIndex, items: int = COMPACT_ITEMS) -> list[tuple[str, list[str]]] | None:
    """(path, sources) of a key index's files in the compact layout, or None when it needs too many.

    The sentences go in the order the listing shows them (by path), so a policy that learns the plan reads
    the listing top down: the first file holds the first member's key sentence (the linked single fact
    that tells the scripted KBGym reader the index is complete), the others the remaining sentences
    `items` at a time; a `merge_files` of them (at most `items` children) under `index/<key>` follows.
    """
    first, *rest = sorted(p for p, _ in k.lines)
    chunks = [[first]] + [rest[i:i + items] for i in range(0, len(rest), items)]
    if len(chunks) > items:
        return None
    return [(f"index/{k.slug}-{n}.md", ps) for n, ps in enumerate(chunks)]


def compact_action(keys: list[KeyIndex], everything: list, left: int) -> str | None:
    """The next call of the compact key-index plan (no `text`: the content executor writes it), or None.

    Largest key first, an index only when all of its calls fit the `left` actions; `stop` is not reserved
    when the merge can take the last one."""
    made = {e.arguments.get("path") for e in everything if e.name in ("create_file", "merge_files")}
    for k in keys:
        plan = compact_plan(k)
        parent = f"index/{k.slug}"
        if plan is None or parent in made:
            continue
        todo = [(p, ps) for p, ps in plan if p not in made]
        if todo:
            if len(todo) == len(plan) and left < len(plan) + 1:  # the whole index must fit (its merge the
                continue  # last action at worst: a budget that runs out ends the build as `stop` would)
            return tool_call_text("create_file", path=todo[0][0], sources=todo[0][1])
        return tool_call_text("merge_files", path=parent, children=[p for p, _ in plan],
                              instruction=k.title[:INSTRUCTION_CHARS])
    return None


def single_index_action(keys: list[KeyIndex], everything: list) -> str:
    """The next call of the one-file index plan: `create_file index/<key>.md` of the largest key's members'
    sentences (in listing order, one call; the grammar's `rollout.max_items` must hold the group), then `stop`."""
    made = {e.arguments.get("path") for e in everything if e.name == "create_file"}
    if keys and f"index/{keys[0].slug}.md" not in made:
        k = keys[0]
        return tool_call_text("create_file", path=f"index/{k.slug}.md", sources=sorted(p for p, _ in k.lines))
    return tool_call_text("stop")


def digest(topic: str, docs: dict[str, str], paths: list[str]) -> str:
    """An extractive file: a title, then each source's path and first non-empty line."""
    lines = [f"# {topic}", ""]
    for p in paths:
        first = next((ln.strip() for ln in docs[p].splitlines() if ln.strip()), "")
        lines.append(f"- {p}: {first[:200]}")
    return "\n".join(lines)


class HeuristicBuilder:
    """The heuristic builder as a policy `(messages, tools) -> assistant message`.

    `compact=True` (or, when None, tools whose `create_file` has no `text`) builds key indexes in the
    compact layout of constrained decoding: no `text` (the attached content executor writes it), at most
    4 sources / children a call, paths without spaces, a short `instruction` on the merge.
    """

    __name__ = "librarian_builder"

    def __init__(self, compact: bool | None = None, single_file: bool = False) -> None:
        self.compact = compact
        self.single_file = single_file  # the compact layout's index as one create_file (`librarian_builder_index`)

    def is_compact(self, tools: Sequence[ToolSchema] | None) -> bool:
        if self.compact is not None:
            return self.compact
        create = next((t["function"] for t in tools or () if t.get("function", {}).get("name") == "create_file"), None)
        return create is not None and "text" not in (create.get("parameters") or {}).get("properties", {})

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        budget = budget_from_prompt(messages) or 40
        used = sum(1 for m in messages if m["role"] == "assistant")
        everything = transcript(messages)  # an attempt that failed is not retried
        events = [e for e in everything if not e.error]
        listings = [(e.arguments.get("path", ""), e.observation) for e in events if e.name == "list"]
        task = next((m["content"] for m in messages if m["role"] == "user"), "")
        if "\nls " in task and "more)" not in task:  # the task message shows the whole top listing
            listings.insert(0, ("", task.split("\nls ", 1)[1]))
        listed = [base for base, _ in listings]
        folders, files = [""], []
        for base, observation in listings:
            for line in observation.splitlines()[1:]:
                m = _ENTRY.match(line)
                if not m:
                    continue
                path = f"{base}/{m[1]}" if base else m[1]
                if m[2] or m[3] == "directory":
                    folders.append(path)
                if m[3] == "raw":
                    files.append(path)
        for folder in folders:
            if folder not in listed:
                return tool_call_text("list", path=folder)
        docs: dict[str, str] = {}
        for e in events:
            if e.name == "read" and (h := _READ_HEADER.match(e.observation)):
                docs[h[2]] = e.observation.split("\n---\n", 1)[-1]
        named = {f: fact for f in files if (fact := name_fact(f)) is not None}
        unread = [f for f in files if f not in docs and f not in named]
        if unread and len(docs) < budget // 2:
            return tool_call_text("read", path=unread[0])
        attempted = {e.arguments.get("path") for e in everything if e.name == "create_file"}
        facts = dict(named)
        for path, text in docs.items():
            if (fact := parse_fact(text.strip())) is not None:
                facts[path] = fact
        keys = key_indexes(facts)
        if keys and self.is_compact(tools) and self.single_file:
            return single_index_action(key_indexes(facts, member_attrs=()), everything)
        if keys and self.is_compact(tools):  # members' key sentences only: 13 members fit 4 files + a merge
            return compact_action(key_indexes(facts, member_attrs=()), everything, budget - used) or tool_call_text("stop")
        if keys:
            call = index_action(keys, attempted, everything, budget - used)
            return call or tool_call_text("stop")
        created = {e.arguments.get("path") for e in events if e.name == "create_file"}
        topics = clusters(docs)
        for word, paths in topics.items():
            path = f"topic-{_slug(word)}.md"
            if path not in attempted:
                return tool_call_text("create_file", path=path, text=digest(word, docs, paths), sources=paths)
        made = [p for p in (f"topic-{_slug(w)}.md" for w in topics) if p in created]
        if len(made) >= 2 and not any(e.name == "merge_files" for e in everything):
            summary = "Topics in this workspace: " + ", ".join(w for w in topics)
            return tool_call_text("merge_files", path="topics", children=made, text=summary)
        return tool_call_text("stop")


class CompactHeuristicBuilder(HeuristicBuilder):
    """The heuristic builder in the compact layout (`librarian_builder_compact`, the SFT teacher of
    `configs/learning_builder.yaml`)."""

    __name__ = "librarian_builder_compact"

    def __init__(self) -> None:
        super().__init__(compact=True)


class SingleIndexBuilder(HeuristicBuilder):
    """The compact heuristic builder whose index is one file (`librarian_builder_index`, the SFT teacher of
    `configs/learning_builder_transfer.yaml`): `create_file index/<key>.md` with every member's key sentence as
    its sources, then `stop`. It needs a grammar whose arrays hold the largest group (`rollout.max_items`)."""

    __name__ = "librarian_builder_index"

    def __init__(self) -> None:
        super().__init__(compact=True, single_file=True)
