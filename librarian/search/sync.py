"""Keep a search index in step with a workspace by following its trace.

`sync()` applies only the changes since the last synced version (deletes,
then upserts) and refreshes BM25 at once; `end_iteration()` also embeds the
nodes added or edited since the last embedding in one batch, as KBGym's
environment does at the end of an iteration (paper 001 §VI-C).
"""

from __future__ import annotations

import os
from pathlib import Path

from librarian.search.base import SearchIndex
from librarian.search.embedded import EmbeddedIndex, read_manifest
from librarian.search.embedders import Embedder
from librarian.workspace import ChangeSet, Workspace

SYNC_KEY = "workspace_version"


class IndexSync:
    """Follows `workspace` into `index`. A new sync (no `version`) indexes every active node first."""

    def __init__(self, index: SearchIndex, workspace: Workspace, version: int | None = None) -> None:
        self.index = index
        self.workspace = workspace
        self.version: int | None = version

    def sync(self, embed: bool = False) -> ChangeSet:
        """Apply the ops since the last sync; returns what changed. BM25 sees them on return."""
        ws = self.workspace
        if self.version is None:
            nodes = list(ws)
            changes = ChangeSet(frozenset(n.id for n in nodes), frozenset(), ws.version)
            self.index.upsert(nodes)
        else:
            changes = ws.changes_since(self.version)
            self.index.delete(sorted(changes.deleted))
            upserts = []
            for node_id in sorted(changes.upserted):
                node = ws.get(node_id)
                if node is None:
                    self.index.delete([node_id])
                else:
                    upserts.append(node)
            self.index.upsert(upserts)
        self.index.refresh(embed=embed)
        self.version = changes.version
        return changes

    def end_iteration(self) -> ChangeSet:
        """Sync, then embed every node added or edited since the last embedding, in one batch."""
        return self.sync(embed=True)

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Persist an embedded index and the synced version beside a workspace snapshot."""
        if not isinstance(self.index, EmbeddedIndex):
            raise TypeError("only the embedded backend persists to a folder; Elasticsearch keeps its own state")
        return self.index.save(folder, extra={SYNC_KEY: self.version})

    @classmethod
    def load(cls, folder: str | os.PathLike[str], workspace: Workspace,
             embedder: Embedder | None = None, resume: bool = False) -> IndexSync:
        """Reopen a saved embedded index for `workspace`.

        By default the next `sync()` reconciles every node (ids no longer in
        the workspace are deleted; unchanged texts keep their vectors, so
        nothing is re-embedded needlessly). With `resume=True` it continues
        from the saved trace version: only for the same workspace history.
        """
        saved = read_manifest(folder)["extra"].get(SYNC_KEY)
        index = EmbeddedIndex.load(folder, embedder)
        if resume and isinstance(saved, int) and 0 <= saved <= workspace.version:
            return cls(index, workspace, saved)
        index.delete([node_id for node_id in index.ids() if workspace.get(node_id) is None])
        return cls(index, workspace, None)
