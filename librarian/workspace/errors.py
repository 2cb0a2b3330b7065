"""The error types of the workspace layer.

`WorkspaceError` is the one error an invalid op raises. Its message is written
for an agent: it names what was wrong and what to do instead. A rejected op
leaves the store exactly as it was.
"""

from __future__ import annotations


class WorkspaceError(ValueError):
    """An op, path or id was invalid; the store is unchanged."""


class SnapshotFormatError(WorkspaceError):
    """A snapshot or trace file is corrupt or has an unknown schema version."""
