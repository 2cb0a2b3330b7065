"""A heuristic Librarian builder (paper 000's baseline shape): cluster by topic, consolidate, nest, stop.

From its own transcript each turn, deterministically:
1. `list` the top folder and the folders under it (breadth first);
2. `read` raw files, up to half the budget;
3. cluster what it read by topic: each document goes to its most widely
   shared salient word (ignoring stop words and words every document has);
4. `create_file` one `topics/<word>.md` per cluster of two or more, its text
   an extractive digest (each source's path and first line) and its sources
   the cluster's documents (provenance);
5. `merge_files` the topic files under one `topics` summary listing them;
6. `stop`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted import tool_call_text
from librarian.models.scripted_kbgym import budget_from_prompt, transcript

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


def digest(topic: str, docs: dict[str, str], paths: list[str]) -> str:
    """An extractive file: a title, then each source's path and first non-empty line."""
    lines = [f"# {topic}", ""]
    for p in paths:
        first = next((ln.strip() for ln in docs[p].splitlines() if ln.strip()), "")
        lines.append(f"- {p}: {first[:200]}")
    return "\n".join(lines)


class HeuristicBuilder:
    """The heuristic builder as a policy `(messages, tools) -> assistant message`."""

    __name__ = "librarian_builder"

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        budget = budget_from_prompt(messages) or 40
        everything = transcript(messages)  # an attempt that failed is not retried
        events = [e for e in everything if not e.error]
        listed = [e.arguments.get("path", "") for e in events if e.name == "list"]
        folders, files = [""], []
        for e in events:
            if e.name != "list":
                continue
            base = e.arguments.get("path", "")
            for line in e.observation.splitlines()[1:]:
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
        unread = [f for f in files if f not in docs]
        if unread and len(docs) < budget // 2:
            return tool_call_text("read", path=unread[0])
        attempted = {e.arguments.get("path") for e in everything if e.name == "create_file"}
        created = {e.arguments.get("path") for e in events if e.name == "create_file"}
        topics = clusters(docs)
        for word, paths in topics.items():
            path = f"topic-{_slug(word)}.md"
            if path not in attempted:
                return tool_call_text("create_file", path=path, text=digest(word, docs, paths), sources=paths)
        made = [p for p in (f"topic-{_slug(w)}.md" for w in topics) if p in created]
        if len(made) >= 2 and not any(e.name == "merge_files" for e in everything):
            summary = "Topics in this workspace: " + ", ".join(w for w in topics)
            return tool_call_text("merge_files", children=made, path="topics", text=summary)
        return tool_call_text("stop")
