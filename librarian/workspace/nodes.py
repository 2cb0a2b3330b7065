"""Nodes: the records a workspace is made of, and the read interface over them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

NodeKind = Literal["raw", "synthetic", "directory"]
Flag = Literal["untouched", "authored", "edited"]

NODE_KINDS: tuple[str, ...] = ("raw", "synthetic", "directory")
FLAGS: tuple[str, ...] = ("untouched", "authored", "edited")


@dataclass(frozen=True, slots=True)
class Node:
    """One document, session, synthetic file or directory of a workspace.

    `links` are navigation edges, `provenance` the nodes this one's content was
    derived from. `origin`, `flag`, `absorbed`, `created_step` and
    `deleted_step` form the hidden ledger: no agent sees or writes them.
    """

    id: str
    path: str
    kind: NodeKind
    text: str
    links: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()
    origin: str | None = None
    flag: Flag = "authored"
    absorbed: tuple[str, ...] = ()
    created_step: int = 0
    deleted_step: int | None = None

    @property
    def active(self) -> bool:
        """True unless the node was deleted (deleted nodes stay as ledger tombstones)."""
        return self.deleted_step is None

    @property
    def name(self) -> str:
        """The last path component."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent_path(self) -> str:
        """The path of the parent ('' for the workspace root)."""
        return self.path.rsplit("/", 1)[0] if "/" in self.path else ""

    def public(self) -> dict[str, object]:
        """The fields an agent may see (never the ledger)."""
        return {
            "id": self.id,
            "path": self.path,
            "kind": self.kind,
            "text": self.text,
            "links": list(self.links),
            "provenance": list(self.provenance),
        }


@dataclass(frozen=True, slots=True)
class Document:
    """An input document for a new workspace: becomes a `raw` node.

    `path` defaults to the id; `origin` defaults to the id (the original fact or
    document this node represents).
    """

    id: str
    text: str
    path: str | None = None
    origin: str | None = None
    metadata: dict[str, str] = field(default_factory=dict, compare=False)


@runtime_checkable
class NodeSource(Protocol):
    """Read access to the active nodes of a workspace.

    Implemented by the live `Workspace` and by the read-only Arrow snapshot
    view, so agent views, statistics and search work on either.
    """

    def get(self, node_id: str) -> Node | None:
        """The active node with this id, or None."""

    def by_path(self, path: str) -> Node | None:
        """The active node at this (normalised) path, or None."""

    def children(self, path: str) -> list[Node]:
        """Active nodes whose parent path is `path` ('' is the root), sorted by path."""

    def __iter__(self) -> Iterator[Node]:
        """All active nodes."""

    def __len__(self) -> int:
        """The number of active nodes."""


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """Workspace-wide state a snapshot carries besides its nodes.

    `step` counts applied ops; `next_serial` numbers the next new node id;
    `raw_policy` is "immutable" (Librarian, JAM: raw nodes are the faithful
    fallback) or "editable" (KBGym: initial facts may be edited and deleted,
    and the ledger records it).
    """

    step: int = 0
    next_serial: int = 0
    raw_policy: Literal["immutable", "editable"] = "immutable"


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """Ids whose content changed (added, edited, moved, relinked) or that were deleted."""

    upserted: frozenset[str]
    deleted: frozenset[str]
    version: int
