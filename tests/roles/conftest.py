"""A small KBGym-style store with a real (BM25-only embedded) search index, and a tiny LLM."""

from __future__ import annotations

import os

import pytest

from librarian.models.hf import tiny_llama
from librarian.roles import ToolContext
from librarian.search import EmbeddedIndex, IndexSync
from librarian.workspace import Document, Workspace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FACTS = [
    ("f1", "Alice Johnson's job is arborist."),
    ("f2", "Alice Johnson lives in Dorringham."),
    ("f3", "Bob Smith's job is baker."),
    ("f4", "Bob Smith is a friend of Alice Johnson."),
    ("f5", "Carol Lee's hobby is astronomy."),
    ("f6", "Carol Lee lives in Dorringham."),
    ("f7", "Dan Park lives in Dorringham."),
    ("f8", "Erin Fox lives in Dorringham."),
    ("f9", "Gus Hale lives in Dorringham."),
    ("f10", "Hana Ito lives in Dorringham."),
]


def make_context(raw_policy: str = "editable") -> ToolContext:
    ws = Workspace.from_documents([Document(i, t, path=f"facts/{i}") for i, t in FACTS], raw_policy=raw_policy)
    index = EmbeddedIndex("roles-test")
    sync = IndexSync(index, ws)
    sync.sync()
    return ToolContext(ws, index, sync)


@pytest.fixture
def ctx() -> ToolContext:
    return make_context()


@pytest.fixture(scope="session")
def tiny():
    return tiny_llama(seed=1)
