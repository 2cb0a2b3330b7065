"""Corpora open as workspaces through `Workspace.from_documents`."""

from __future__ import annotations

from librarian.datasets import to_documents
from librarian.datasets.memorygym import MemoryGymConfig, build_memorygym
from librarian.workspace import Workspace


def test_kbgym_store_has_raw_facts_and_no_links(kb500):
    ws = Workspace.from_documents(to_documents(kb500.corpus), raw_policy="editable")
    nodes = [n for n in ws if n.kind == "raw"]
    assert len(nodes) == len(kb500.corpus)
    assert all(not n.links for n in nodes)
    assert {n.origin for n in nodes} == {d.origin for d in kb500.corpus}


def test_memorygym_sessions_become_raw_nodes_under_sessions():
    b = build_memorygym(MemoryGymConfig(sessions=5))
    ws = Workspace.from_documents(to_documents(b.corpus))
    assert [n.path for n in ws.children("sessions")] == [f"sessions/session-{i:03d}" for i in range(5)]
