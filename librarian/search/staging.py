"""Staged writes shared by the backends: upserts and deletes wait for `refresh()`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from librarian.search.base import SearchRecord, record_of
from librarian.search.errors import SearchError
from librarian.workspace.nodes import Node


class WriteStage:
    """The writes not yet applied (id -> record, or None for a delete) and the ids waiting for embedding.

    `embedded_text(id)` tells the text a node's current vector was computed
    from (None if it has none): an upsert whose text did not change is not
    re-embedded (a link or a move changes the node, not its meaning).
    """

    def __init__(self, track_embeddings: bool, embedded_text: Callable[[str], str | None]) -> None:
        self.writes: dict[str, SearchRecord | None] = {}
        self.dirty: set[str] = set()
        self._track = track_embeddings
        self._embedded_text = embedded_text

    def upsert(self, nodes: Iterable[Node]) -> None:
        if isinstance(nodes, Node):
            raise SearchError("upsert takes an iterable of nodes; wrap a single node in a list")
        for node in nodes:
            if not isinstance(node, Node):
                raise SearchError(f"upsert takes workspace Node objects, got {type(node).__name__}")
            if not node.active:
                self.delete([node.id])
                continue
            record = record_of(node)
            self.writes[node.id] = record
            if self._track:
                had = self._embedded_text(node.id)
                if had == record.text or (had is None and not record.text.strip()):
                    self.dirty.discard(node.id)  # same vector as now (a blank text has none)
                else:
                    self.dirty.add(node.id)

    def delete(self, ids: Iterable[str]) -> None:
        if isinstance(ids, str):
            raise SearchError("delete takes an iterable of ids; wrap a single id in a list")
        for node_id in ids:
            if not isinstance(node_id, str):
                raise SearchError(f"delete takes string ids, got {node_id!r}")
            self.writes[node_id] = None
            self.dirty.discard(node_id)

    def take_writes(self) -> dict[str, SearchRecord | None]:
        writes, self.writes = self.writes, {}
        return writes


class StagedWrites:
    """The write half of the `SearchIndex` contract for backends that stage writes until `refresh()`."""

    _stage: WriteStage

    @property
    def pending_embeddings(self) -> int:
        """Upserted nodes whose embedding waits for `refresh(embed=True)`."""
        return len(self._stage.dirty)

    @property
    def staged_writes(self) -> int:
        """Upserts and deletes waiting for `refresh()`."""
        return len(self._stage.writes)

    def upsert(self, nodes: Iterable[Node]) -> None:
        self._stage.upsert(nodes)

    def delete(self, ids: Iterable[str]) -> None:
        self._stage.delete(ids)
