"""The workspace: nodes, typed ops, the trace and replay, the Arrow codec, and agent views."""

from librarian.workspace import codec, views
from librarian.workspace.change_set import OpResult
from librarian.workspace.dedup import DedupVerdict, NearDuplicateGuard
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError
from librarian.workspace.nodes import ChangeSet, Document, Node, NodeSource, SnapshotMeta
from librarian.workspace.ops import (
    Add,
    AddDocument,
    CreateFile,
    Delete,
    Edit,
    Link,
    LinkMany,
    MakeDir,
    MergeFiles,
    Move,
    Op,
    Unlink,
    op_from_dict,
)
from librarian.workspace.snapshot_view import SnapshotView
from librarian.workspace.store import Workspace
from librarian.workspace.trace import TraceEntry, read_trace, replay, write_trace

__all__ = [
    "Add", "AddDocument", "ChangeSet", "CreateFile", "DedupVerdict", "Delete", "Document", "Edit", "Link", "LinkMany",
    "MakeDir", "MergeFiles", "Move", "NearDuplicateGuard", "Node", "NodeSource", "Op", "OpResult",
    "SnapshotFormatError", "SnapshotMeta", "SnapshotView", "TraceEntry", "Unlink", "Workspace", "WorkspaceError",
    "codec", "op_from_dict", "read_trace", "replay", "views", "write_trace",
]
