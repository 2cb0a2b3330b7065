"""Small workspaces shared by the workspace tests."""

from __future__ import annotations

import pytest

from librarian.workspace import CreateFile, Delete, Document, Link, MakeDir, MergeFiles, Workspace

FACTS = [
    ("f1", "Alice Johnson's job is arborist."),
    ("f2", "Alice Johnson lives in Dorringham."),
    ("f3", "Bob Smith's job is baker."),
    ("f4", "Bob Smith is a friend of Alice Johnson."),
    ("f5", "Carol Lee's hobby is astronomy."),
]


def fact_docs(prefix: str = "raw") -> list[Document]:
    return [Document(i, t, path=f"{prefix}/{i}.txt") for i, t in FACTS]


@pytest.fixture
def docs() -> list[Document]:
    return fact_docs()


@pytest.fixture
def ws(docs: list[Document]) -> Workspace:
    return Workspace.from_documents(docs)


@pytest.fixture
def kb() -> Workspace:
    """A KBGym-style store: flat atomic facts, editable, no links."""
    return Workspace.from_documents([Document(i, t) for i, t in FACTS], raw_policy="editable")


@pytest.fixture
def curated(ws: Workspace) -> Workspace:
    """A curated store: a directory, files with provenance, a merge, a link, a tombstone and a reused path."""
    ws.apply(MakeDir("people", "People."))
    ws.apply(CreateFile("people/alice.md", "Alice.", ("f1", "f2")))
    ws.apply(CreateFile("people/bob.md", "Bob.", ("f3",)))
    ws.apply(MergeFiles(("people/alice.md", "people/bob.md"), "people/friends.md", "Friends."))
    ws.apply(Link("people/friends.md", "f4"))
    ws.apply(CreateFile("tmp.md", "scratch", ("f5",)))
    ws.apply(Delete("tmp.md"))
    ws.apply(CreateFile("tmp.md", "second scratch at the same path", ("f5",)))
    return ws
