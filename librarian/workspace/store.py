"""The workspace: the live, mutable store of nodes that every op goes through."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Literal

import pyarrow as pa

from librarian.workspace.change_set import OpPlan, OpResult
from librarian.workspace.codec import SnapshotEncoder, content_hash
from librarian.workspace.dedup import DedupVerdict, NearDuplicateGuard
from librarian.workspace.errors import WorkspaceError
from librarian.workspace.handlers import PLANNERS
from librarian.workspace.nodes import NODE_KINDS, ChangeSet, Document, Node, SnapshotMeta
from librarian.workspace.ops import Op, op_from_dict
from librarian.workspace.paths import ancestors, normalize_file_path, parent_of, validate_id
from librarian.workspace.trace import TraceEntry


class Workspace:
    """Nodes addressed by id and path, changed only through validated, atomic ops.

    Deleted nodes stay as tombstones (the ledger needs them) but are invisible
    to `get`, `by_path`, `children` and iteration. Every applied op is
    appended to `trace`; `replay` rebuilds the same state from it. The last
    applied op can be taken back with `revert_last` (a server whose save failed).
    """

    def __init__(self, meta: SnapshotMeta | None = None, guard: NearDuplicateGuard | None = None) -> None:
        self.meta = meta or SnapshotMeta()
        self.guard = guard
        self.trace: list[TraceEntry] = []
        self._nodes: dict[str, Node] = {}
        self._by_path: dict[str, str] = {}
        self._children: dict[str, set[str]] = {}
        self._referrers: dict[str, set[str]] = {}
        # keys of the index sets this object may mutate in place (the others may be shared with a copy)
        self._owned: tuple[set[str], set[str]] = (set(), set())
        self._active = 0
        self._encoder: SnapshotEncoder | None = None
        self._undo: tuple[dict[str, Node | None], SnapshotMeta] | None = None  # what the last op replaced

    # ----- construction
    @classmethod
    def from_documents(cls, docs: Iterable[Document], raw_policy: Literal["immutable", "editable"] = "immutable",
                       guard: NearDuplicateGuard | None = None) -> Workspace:
        """A new workspace whose raw nodes are `docs`; parent directories are created as needed."""
        if raw_policy not in ("immutable", "editable"):
            raise WorkspaceError(f"raw_policy must be 'immutable' or 'editable', got {raw_policy!r}")
        nodes: list[Node] = []
        seen_ids: set[str] = set()
        paths: dict[str, str] = {}
        dirs: dict[str, Node] = {}
        for doc in docs:
            doc_id = validate_id(doc.id, "document id")
            if doc_id in seen_ids:
                raise WorkspaceError(f"document id {doc_id!r} appears twice")
            seen_ids.add(doc_id)
            path = normalize_file_path(doc.path if doc.path is not None else doc_id)
            if path in paths:
                raise WorkspaceError(f"documents {paths[path]!r} and {doc_id!r} share the path {path!r}")
            paths[path] = doc_id
            if not isinstance(doc.text, str):
                raise WorkspaceError(f"document {doc_id!r}: text must be a string")
            _require_utf8(doc.text, f"document {doc_id!r}: its text")
            if doc.origin is not None:
                _require_utf8(str(doc.origin), f"document {doc_id!r}: its origin")
            for ancestor in ancestors(path):
                if ancestor not in dirs:
                    dirs[ancestor] = Node(id="", path=ancestor, kind="directory", text="", flag="authored")
            nodes.append(Node(id=doc_id, path=path, kind="raw", text=doc.text,
                              origin=doc.origin if doc.origin is not None else doc_id, flag="untouched"))
        serial = 0
        directories: list[Node] = []
        for path in sorted(dirs):
            if path in paths:
                raise WorkspaceError(f"{path!r} is both a document and a folder of other documents")
            while f"n{serial}" in seen_ids:
                serial += 1
            directories.append(replace(dirs[path], id=f"n{serial}"))
            serial += 1
        return cls.from_state(directories + nodes, SnapshotMeta(0, serial, raw_policy), guard=guard)

    @classmethod
    def from_state(cls, nodes: Iterable[Node], meta: SnapshotMeta, guard: NearDuplicateGuard | None = None) -> Workspace:
        """A workspace holding exactly these nodes (tombstones included) and this meta."""
        ws = cls(meta, guard)
        nodes = list(nodes)
        store = ws._nodes
        paths: dict[str, str] = {}
        for node in nodes:
            if node.id in store:
                raise WorkspaceError(f"node id {node.id!r} appears twice in the snapshot")
            if node.kind not in NODE_KINDS:
                raise WorkspaceError(f"node {node.id!r} has unknown kind {node.kind!r}")
            if node.deleted_step is None:
                if node.path in paths:
                    raise WorkspaceError(f"nodes {paths[node.path]!r} and {node.id!r} share the path {node.path!r}")
                paths[node.path] = node.id
            store[node.id] = node
        ws._bulk_index(nodes)
        return ws

    def state(self) -> tuple[list[Node], SnapshotMeta]:
        """Every node (tombstones too, in insertion order) and the meta: what a snapshot stores."""
        return list(self._nodes.values()), self.meta

    def copy(self) -> Workspace:
        """An independent workspace with the same nodes and meta (the trace is not copied).

        Nodes are immutable, so the copy shares them and duplicates only the indexes.
        """
        ws = Workspace(self.meta, self.guard)
        ws._nodes = dict(self._nodes)
        ws._by_path = dict(self._by_path)
        # the index sets are shared copy-on-write: neither side owns them any more
        ws._children, ws._referrers = dict(self._children), dict(self._referrers)
        self._owned = (set(), set())
        ws._active = self._active
        return ws

    def to_table(self) -> pa.Table:
        """The snapshot as an Arrow table (`codec` schema), re-encoding only nodes changed since the last call.

        This is what crosses actors: `codec.table_to_ipc_bytes(ws.to_table())`
        on one side, `SnapshotView` over the bytes on the other.
        """
        if self._encoder is None:
            self._encoder = SnapshotEncoder()
        return self._encoder.encode(self._nodes.values(), self.meta)

    def content_hash(self) -> str:
        """The snapshot's content hash (equal for equal snapshots)."""
        return content_hash(self._nodes.values(), self.meta)

    # ----- NodeSource
    def get(self, node_id: str) -> Node | None:
        node = self._nodes.get(node_id)
        return node if node is not None and node.active else None

    def get_any(self, node_id: str) -> Node | None:
        """The node with this id, deleted or not."""
        return self._nodes.get(node_id)

    def by_path(self, path: str) -> Node | None:
        node_id = self.id_at(path)
        return self._nodes[node_id] if node_id is not None else None

    def id_at(self, path: str) -> str | None:
        return self._by_path.get(path)

    def children(self, path: str) -> list[Node]:
        return sorted((self._nodes[i] for i in self._children.get(path, ())), key=lambda n: n.path)

    def referrer_ids(self, node_id: str) -> set[str]:
        """Ids of active nodes with an edge (link or provenance) to `node_id`."""
        return set(self._referrers.get(node_id, ()))

    def __iter__(self) -> Iterator[Node]:
        return (n for n in self._nodes.values() if n.active)

    def __len__(self) -> int:
        return self._active

    def all_nodes(self) -> list[Node]:
        return list(self._nodes.values())

    # ----- changes
    @property
    def version(self) -> int:
        """The number of ops applied to this workspace object (its trace length)."""
        return len(self.trace)

    def apply(self, op: Op, verdicts: tuple[DedupVerdict, ...] | None = None) -> OpResult:
        """Validate `op`, then apply it atomically and append it to the trace.

        Raises `WorkspaceError` (and changes nothing) if the op is invalid.
        `verdicts` replays recorded near-duplicate verdicts instead of judging.
        """
        if not isinstance(op, Op):
            raise WorkspaceError(f"expected an op, got {type(op).__name__}")
        return self.apply_payload(op.to_dict(), verdicts)

    def apply_payload(self, payload: object, verdicts: tuple[DedupVerdict, ...] | None = None) -> OpResult:
        """Like `apply`, for an op given as its JSON payload (an agent's tool call, a trace entry)."""
        op = op_from_dict(payload)
        plan = OpPlan(self)
        result = PLANNERS[type(op)](plan, op, self.guard, verdicts)
        self._commit(plan)
        self.trace.append(TraceEntry(result.step, op.to_dict(), result.verdicts,
                                     result.created, result.changed, result.deleted))
        return result

    def changes_since(self, version: int) -> ChangeSet:
        """Ids upserted and deleted by the ops applied after `version`."""
        if not 0 <= version <= self.version:
            raise WorkspaceError(f"version {version} is outside 0..{self.version}")
        upserted: set[str] = set()
        deleted: set[str] = set()
        for entry in self.trace[version:]:
            upserted.update(entry.created, entry.changed)
            deleted.update(entry.deleted)
        return ChangeSet(frozenset(upserted - deleted), frozenset(deleted), self.version)

    def revert_last(self) -> None:
        """Take back the most recent op applied to this object: nodes, indexes, meta and trace as before it.

        For a caller whose follow-up failed (a server that could not save the
        snapshot). Only one op can be taken back; a second call raises `WorkspaceError`.
        """
        if self._undo is None:
            raise WorkspaceError("there is no applied op to revert")
        before, meta = self._undo
        for node_id, old in before.items():
            new = self._nodes[node_id]
            if old is None:
                self._unindex(new)
                del self._nodes[node_id]  # new nodes were appended last: insertion order is restored
            elif old.active and new.active:
                self._nodes[node_id] = old
                self._reindex(new, old)
            else:
                self._unindex(new)
                self._nodes[node_id] = old
                self._index(old)
        self.meta = meta
        self.trace.pop()
        self._undo = None

    # ----- internals
    def _commit(self, plan: OpPlan) -> None:
        self._undo = ({i: self._nodes.get(i) for i in plan.pending}, self.meta)
        for node_id, node in plan.pending.items():
            old = self._nodes.get(node_id)
            self._nodes[node_id] = node
            if old is not None and old.active and node.active:
                self._reindex(old, node)
            else:
                if old is not None:
                    self._unindex(old)
                self._index(node)
        self.meta = replace(self.meta, step=plan.step, next_serial=plan.serial)

    def _reindex(self, old: Node, new: Node) -> None:
        """Update the indexes for a node that stays active: only what changed."""
        if old.path != new.path:
            del self._by_path[old.path]
            self._by_path[new.path] = new.id
            self._own(self._children, 0, parent_of(old.path)).discard(new.id)
            self._own(self._children, 0, parent_of(new.path)).add(new.id)
        if old.links != new.links or old.provenance != new.provenance:
            before, after = {*old.links, *old.provenance}, {*new.links, *new.provenance}
            for target in before - after:
                self._own(self._referrers, 1, target).discard(new.id)
            for target in after - before:
                self._own(self._referrers, 1, target).add(new.id)

    def _own(self, index: dict[str, set[str]], which: int, key: str) -> set[str]:
        """The set at `index[key]`, copied first if it may be shared with a copy of this workspace."""
        owned = self._owned[which]
        if key not in owned:
            index[key] = set(index.get(key, ()))
            owned.add(key)
        return index[key]

    def _bulk_index(self, nodes: Iterable[Node]) -> None:
        """Index many new nodes at once (all index sets are then owned by this object)."""
        by_path, children, referrers = self._by_path, self._children, self._referrers
        for node in nodes:
            if node.deleted_step is not None:
                continue
            self._active += 1
            by_path[node.path] = node.id
            parent = node.path.rpartition("/")[0]
            bucket = children.get(parent)
            if bucket is None:
                bucket = children[parent] = set()
            bucket.add(node.id)
            for target in node.links + node.provenance:
                bucket = referrers.get(target)
                if bucket is None:
                    bucket = referrers[target] = set()
                bucket.add(node.id)
        self._owned = (set(children), set(referrers))

    def _index(self, node: Node) -> None:
        if not node.active:
            return
        self._active += 1
        self._by_path[node.path] = node.id
        self._own(self._children, 0, parent_of(node.path)).add(node.id)
        for target in (*node.links, *node.provenance):
            self._own(self._referrers, 1, target).add(node.id)

    def _unindex(self, node: Node) -> None:
        if not node.active:
            return
        self._active -= 1
        del self._by_path[node.path]
        self._own(self._children, 0, parent_of(node.path)).discard(node.id)
        for target in (*node.links, *node.provenance):
            self._own(self._referrers, 1, target).discard(node.id)


def _require_utf8(value: str, what: str) -> None:
    """Raise `WorkspaceError` if `value` cannot be saved as UTF-8 (a lone surrogate)."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkspaceError(f"{what} holds a lone surrogate at character {exc.start}; "
                             "it is not valid Unicode and could not be saved") from None
