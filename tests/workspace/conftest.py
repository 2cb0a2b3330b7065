"""Small workspaces shared by the workspace tests."""

from __future__ import annotations

import pytest

from librarian.workspace import Document, Workspace

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
