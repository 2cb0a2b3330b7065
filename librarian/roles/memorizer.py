"""The JAM memorizer (paper 002): a memo per session and a hierarchical workspace built from the memos.

Layout of a memorized workspace:

- `sessions/<id>`: the raw sessions, unchanged (the faithful, path-traceable evidence);
- `memory/`: a directory whose README lists the groups and who is in them;
- `memory/<group>/`: one directory per group of related sessions (the same
  people talking), whose README is built from its children's memos;
- `memory/<group>/<id>.md`: the session's memo, a synthetic file whose
  provenance is the raw session.

A memo is written by a `memo_fn(session) -> text`: `extractive_memo`
(deterministic: the session's title, its people, and its sentences that name
someone or something, bounded) or `llm_memo(backend)`. Grouping is by the
set of speakers (`Name: ...` lines), so related sessions share a folder.

`memorize(sessions)` builds the whole workspace; `append_session(ws,
session)` adds one session incrementally: the new raw session, its memo,
and an edit of its group's README; nothing else changes (a new group also
adds its directory and one line of the `memory` README).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from librarian.models.base import PolicyBackend, SamplingParams
from librarian.roles.content_executor import LLMExecutor, Source, sentences
from librarian.workspace.nodes import Document
from librarian.workspace.ops import AddDocument, CreateFile, Edit, MakeDir
from librarian.workspace.store import Workspace

ROOT = "memory"
SESSIONS = "sessions"
_SPEAKER = re.compile(r"^([A-Z][\w'.-]*(?: [A-Z][\w'.-]*)*):\s", re.M)
_NAME = re.compile(r"\b[A-Z][a-z'-]+(?: [A-Z][a-z'-]+)+\b")
_INFORMATIVE = re.compile(r"\b[A-Z][a-z]+\b|\d")

MemoFn = Callable[[Document], str]


def speakers(text: str) -> list[str]:
    """The people who speak in a session (`Name: ...` lines), in order of first turn."""
    return list(dict.fromkeys(_SPEAKER.findall(text)))


def names(text: str) -> list[str]:
    """Multi-word capitalised names mentioned in a text, in order of first mention."""
    return list(dict.fromkeys(_NAME.findall(text)))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "other"


def group_of(text: str) -> str:
    """The directory name of a session's group: its speakers, sorted, as one slug ('other' with none)."""
    people = sorted(speakers(text))
    return "--".join(slug(p) for p in people) if people else "other"


def extractive_memo(session: Document, max_chars: int = 400) -> str:
    """Title line, `People:` (speakers and everyone named), then the informative sentences, bounded."""
    lines = [ln for ln in session.text.splitlines() if ln.strip()]
    title = lines[0].strip() if lines and not _SPEAKER.match(lines[0]) else session.id
    body = "\n".join(ln for ln in lines if _SPEAKER.match(ln))
    people = list(dict.fromkeys(speakers(session.text) + names(body)))
    facts = []
    for line in body.splitlines():
        who = _SPEAKER.match(line)
        for sent in sentences(line[who.end():] if who else line):
            rest = sent.split(" ", 1)[1] if " " in sent else ""
            if _INFORMATIVE.search(rest) or names(sent):  # something beyond a capital at the start
                facts.append(f"{who.group(1).split()[0]}: {sent}" if who else sent)
    memo = f"{title}. People: {', '.join(people) or 'none'}. " + " ".join(facts)
    return memo if len(memo) <= max_chars else memo[: max_chars - 3].rstrip() + "..."


def llm_memo(backend: PolicyBackend, max_chars: int = 400,
             params: SamplingParams = SamplingParams(max_new_tokens=160, temperature=0.0)) -> MemoFn:
    """A memo written by a backend (through the content executor's prompt), bounded to `max_chars`."""
    executor = LLMExecutor(backend, max_chars=max_chars, params=params)

    def memo(session: Document) -> str:
        return executor(f"{ROOT}/{session.id}.md", [Source(session.path or session.id, session.text)],
                        "a memo: who talks, and every fact about a person, place, job or date")

    return memo


def group_readme(group: str, memos: Sequence[tuple[str, str, str]]) -> str:
    """A group's README from its children: (memo file name, raw session path, memo) in session order."""
    people = sorted({p for _, _, m in memos for p in _people_line(m)})
    head = f"Sessions of {_label(group)} ({len(memos)}). People: {', '.join(people)}."
    return "\n".join([head, *(f"- {name} (source: {raw}): {memo}" for name, raw, memo in memos)])


def _label(group: str) -> str:
    return " & ".join(part.replace("-", " ").title() for part in group.split("--"))


def _people_line(memo: str) -> list[str]:
    m = re.search(r"People: (.*?)\. ", memo + " ")
    return [p.strip() for p in m.group(1).split(",")] if m and m.group(1) != "none" else []


def root_readme(groups: Iterable[str]) -> str:
    """The `memory` README: one line per group (no counts, so appending to a group leaves it unchanged)."""
    lines = ["Memory of past sessions, one folder per group of people talking; each folder's README lists "
             "its sessions with a memo and the raw source path."]
    lines += [f"- {g}/: {_label(g)}" for g in sorted(groups)]
    return "\n".join(lines)


@dataclass
class Memorizer:
    """Builds and extends a JAM workspace; `memo_fn` writes memos (extractive by default)."""

    memo_fn: MemoFn = extractive_memo

    def memorize(self, sessions: Sequence[Document]) -> Workspace:
        """The hierarchical workspace of these sessions (raw sessions under `sessions/`)."""
        docs = [replace(s, path=f"{SESSIONS}/{s.id}") for s in sessions]
        ws = Workspace.from_documents(docs)
        by_group: dict[str, list[tuple[Document, str]]] = {}
        for doc in docs:
            by_group.setdefault(group_of(doc.text), []).append((doc, self.memo_fn(doc)))
        ws.apply(MakeDir(ROOT, root_readme(by_group)))
        for group, items in sorted(by_group.items()):
            rows = [(f"{d.id}.md", d.path or d.id, memo) for d, memo in items]
            ws.apply(MakeDir(f"{ROOT}/{group}", group_readme(group, rows)))
            for d, memo in items:
                ws.apply(CreateFile(f"{ROOT}/{group}/{d.id}.md", memo, (d.id,)))
        return ws

    def append_session(self, ws: Workspace, session: Document) -> Workspace:
        """`ws` plus one more session: its raw node, its memo, and its group's README updated.

        Returns a copy of `ws` (the original is untouched) whose trace continues
        `ws`'s: the raw session arrives through an `AddDocument` op, the memo and
        README changes are ordinary ops, and nothing else is rebuilt.
        """
        if ws.get(session.id) is not None:
            raise ValueError(f"session {session.id!r} is already in the workspace")
        if ws.by_path(SESSIONS) is None or ws.by_path(ROOT) is None:
            raise ValueError("append_session extends a memorized workspace; build one with memorize() first")
        out = ws.copy()
        out.trace = list(ws.trace)
        raw = out.get(out.apply(AddDocument(session.id, session.text, f"{SESSIONS}/{session.id}",
                                            session.origin or session.id)).created[-1])
        group = group_of(session.text)
        memo = self.memo_fn(replace(session, path=raw.path))
        folder = f"{ROOT}/{group}"
        if out.by_path(folder) is None:
            groups = [n.name for n in out.children(ROOT) if n.kind == "directory"] + [group]
            out.apply(Edit(out.id_at(ROOT), root_readme(groups)))  # type: ignore[arg-type]
            out.apply(MakeDir(folder, ""))
        out.apply(CreateFile(f"{folder}/{session.id}.md", memo, (session.id,)))
        rows = [(n.name, out.get(n.provenance[0]).path if n.provenance else "", n.text)  # type: ignore[union-attr]
                for n in out.children(folder) if n.kind == "synthetic"]
        out.apply(Edit(out.id_at(folder), group_readme(group, rows)))  # type: ignore[arg-type]
        return out
