"""`Snapshot`: a workspace frozen once where it is built, with its content hash beside the bytes.

`freeze(workspace)` encodes the workspace as Arrow IPC stream bytes (what
crosses actors) and hashes its content in the same place, so whoever
receives the snapshot keys caches by `key` without decoding it: the bytes
are decoded once, where the snapshot is read (a probe's `SnapshotView`).
"""

from __future__ import annotations

from dataclasses import dataclass

from librarian.workspace import codec
from librarian.workspace.store import Workspace


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A frozen workspace: `key` is the content hash of the table `data` (Arrow IPC stream bytes) encodes."""

    key: str
    data: bytes

    def __repr__(self) -> str:
        return f"Snapshot({self.key[:12]}, {len(self.data)} bytes)"


def freeze(workspace: Workspace) -> Snapshot:
    """`workspace` encoded once and hashed once (`Workspace.content_hash`, equal to hashing the decoded bytes)."""
    return Snapshot(workspace.content_hash(), codec.table_to_ipc_bytes(workspace.to_table()))
