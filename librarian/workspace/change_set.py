"""A pending change set: ops are planned here, then committed in one step.

Every check runs while planning, against the store plus the changes planned so
far; nothing touches the store until the whole op is valid. Committing a plan
cannot fail, which is what makes ops atomic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from librarian.workspace.dedup import DedupVerdict
from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Node
from librarian.workspace.paths import ancestors, normalize_file_path, validate_id

if TYPE_CHECKING:
    from librarian.workspace.store import Workspace


@dataclass(frozen=True, slots=True)
class OpResult:
    """What an applied op did, and the message an agent sees."""

    op: str
    step: int
    created: tuple[str, ...]
    changed: tuple[str, ...]
    deleted: tuple[str, ...]
    message: str
    merged_into: str | None = None
    verdicts: tuple[DedupVerdict, ...] = ()


class OpPlan:
    """The nodes an op will write, keyed by id, over the store's current state."""

    def __init__(self, store: Workspace) -> None:
        self.store = store
        self.step = store.meta.step + 1
        self.serial = store.meta.next_serial
        self.pending: dict[str, Node] = {}
        self.created: list[str] = []
        self.reserved: set[str] = set()  # ids an op has claimed before creating folders: never allocated

    # ----- reading through the pending changes
    def node(self, node_id: str) -> Node | None:
        """The planned or stored node with this id (tombstones included)."""
        return self.pending[node_id] if node_id in self.pending else self.store.get_any(node_id)

    def active(self, node_id: str) -> Node | None:
        node = self.node(node_id)
        return node if node is not None and node.active else None

    def id_at(self, path: str) -> str | None:
        """The id of the active node at `path`, after the planned changes."""
        for node in self.pending.values():
            if node.active and node.path == path:
                return node.id
        stored = self.store.id_at(path)
        if stored is None:
            return None
        planned = self.pending.get(stored)
        if planned is not None and (not planned.active or planned.path != path):
            return None
        return stored

    def resolve(self, ref: object, what: str = "target") -> Node:
        """An active node by id, else by path; a clear error when there is none."""
        if not isinstance(ref, str) or not ref.strip():
            raise WorkspaceError(f"{what} must be a non-empty id or path, got {ref!r}")
        node = self.active(ref)
        if node is not None:
            return node
        try:
            path = normalize_file_path(ref)
        except WorkspaceError:
            path = None
        if path is not None:
            node_id = self.id_at(path)
            if node_id is not None:
                return self.active(node_id)  # type: ignore[return-value]
        gone = self.node(ref)
        if gone is not None and not gone.active:
            raise WorkspaceError(f"{what} {ref!r} was deleted at step {gone.deleted_step}")
        raise WorkspaceError(f"{what} {ref[:120]!r} does not exist; use ls or search to find ids and paths")

    def descendants(self, node: Node) -> list[Node]:
        """Active nodes nested anywhere below `node` (from the stored state)."""
        out: list[Node] = []
        stack = [node.path]
        while stack:
            for child in self.store.children(stack.pop()):
                current = self.active(child.id)
                if current is not None:
                    out.append(current)
                    stack.append(child.path)
        return out

    def referrers(self, node_id: str) -> list[Node]:
        """Active nodes with a link or provenance edge to `node_id`."""
        ids = set(self.store.referrer_ids(node_id))
        ids.update(n.id for n in self.pending.values() if n.active and (node_id in n.links or node_id in n.provenance))
        found = (self.active(i) for i in sorted(ids))
        return [n for n in found if n is not None and (node_id in n.links or node_id in n.provenance)]

    # ----- rules
    @property
    def raw_protected(self) -> bool:
        return self.store.meta.raw_policy == "immutable"

    def require_mutable(self, node: Node, action: str) -> None:
        if node.kind == "raw" and self.raw_protected:
            raise WorkspaceError(
                f"cannot {action} {node.id!r}: it is a raw document, kept unchanged as the faithful source; "
                "create a synthetic file that links to it instead"
            )

    # ----- writing
    def put(self, node: Node) -> None:
        self.pending[node.id] = node

    def peek_id(self) -> str:
        """The id the next created node will get."""
        serial = self.serial
        while self.node(f"n{serial}") is not None or f"n{serial}" in self.reserved:
            serial += 1
        return f"n{serial}"

    def new_id(self) -> str:
        node_id = self.peek_id()
        self.serial = int(node_id[1:]) + 1
        return node_id

    def create(self, path: str, kind: str, text: str, links: tuple[str, ...] = (), provenance: tuple[str, ...] = ()) -> Node:
        """A new authored node at a free path; missing parent directories are created first."""
        self.ensure_parents(path)
        if self.id_at(path) is not None:
            raise WorkspaceError(f"path {path!r} is already taken by {self.id_at(path)!r}; choose another name")
        node = Node(
            id=self.new_id(), path=path, kind=kind, text=text, links=links, provenance=provenance,  # type: ignore[arg-type]
            origin=None, flag="authored", created_step=self.step,
        )
        self.put(node)
        self.created.append(node.id)
        return node

    def ensure_parents(self, path: str) -> None:
        for ancestor in ancestors(path):
            existing = self.id_at(ancestor)
            if existing is None:
                self.create(ancestor, "directory", "")
            elif self.active(existing).kind == "raw":  # type: ignore[union-attr]
                raise WorkspaceError(f"cannot put anything under {ancestor!r}: it is a raw document, not a directory")

    def delete(self, node: Node, redirect_to: str | None = None) -> None:
        """Tombstone `node`; edges to it are removed (or redirected to `redirect_to`)."""
        nested = self.descendants(node)
        if nested:
            raise WorkspaceError(
                f"cannot delete {node.path!r}: {len(nested)} node(s) are nested under it; move or delete them first"
            )
        for ref in self.referrers(node.id):
            if ref.id == node.id:
                continue
            self.put(replace(ref, links=_swap(ref.links, node.id, redirect_to, ref.id),
                             provenance=_swap(ref.provenance, node.id, redirect_to, ref.id)))
        self.put(replace(self.node(node.id), deleted_step=self.step))  # type: ignore[type-var]

    def relocate(self, node: Node, new_path: str) -> None:
        """Move `node` and its subtree to `new_path` (checks included)."""
        if new_path == node.path:
            raise WorkspaceError(f"{node.id!r} is already at {new_path!r}")
        if new_path.startswith(node.path + "/"):
            raise WorkspaceError(f"cannot move {node.path!r} into itself ({new_path!r})")
        subtree = self.descendants(node)
        for moved in [node, *subtree]:
            self.require_mutable(moved, "move")
        self.ensure_parents(new_path)
        taken = self.id_at(new_path)
        if taken is not None:
            raise WorkspaceError(f"path {new_path!r} is already taken by {taken!r}; choose another name")
        old_prefix = node.path
        for moved in [node, *subtree]:
            self.put(replace(self.node(moved.id), path=new_path + moved.path[len(old_prefix):]))  # type: ignore[type-var]

    def targets(self, refs: tuple[str, ...], what: str) -> tuple[str, ...]:
        """Resolve refs to ids, in order, without repeats."""
        out: list[str] = []
        for ref in refs:
            validate_id(ref, what)
            node_id = self.resolve(ref, what).id
            if node_id not in out:
                out.append(node_id)
        return tuple(out)

    def result(self, op: str, message: str, merged_into: str | None = None,
               verdicts: tuple[DedupVerdict, ...] = ()) -> OpResult:
        deleted = tuple(i for i, n in self.pending.items() if not n.active and self.store.get(i) is not None)
        changed = tuple(i for i in self.pending if i not in self.created and i not in deleted)
        return OpResult(op, self.step, tuple(self.created), changed, deleted, message, merged_into, verdicts)


def _swap(edges: tuple[str, ...], old: str, new: str | None, owner: str) -> tuple[str, ...]:
    out: list[str] = []
    for edge in edges:
        edge = new if edge == old else edge
        if edge is not None and edge != owner and edge not in out:
            out.append(edge)
    return tuple(out)
