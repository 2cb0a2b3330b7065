"""A built workspace on disk: the folder `librarian build` writes, and how commands open it.

Layout of a build folder: `initial.parquet` (the raw store), `snapshot.parquet`
(the built workspace), `trace.parquet` (every op), `index/` (the embedded
search index), `export/` (a folder tree a person can walk), `workspace.json`
(what the other commands need to reopen it) and `results.json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian.online.versions import VersionStore
from librarian.search.embedded import EmbeddedIndex
from librarian.search.embedders import make_embedder
from librarian.workspace import SnapshotView, Workspace, codec
from librarian.workspace.errors import WorkspaceError

MANIFEST = "workspace.json"
SNAPSHOT = "snapshot.parquet"
INITIAL = "initial.parquet"
TRACE = "trace.parquet"
INDEX = "index"
EXPORT = "export"


@dataclass
class OpenedWorkspace:
    """A workspace opened for reading (a `SnapshotView`) or writing (a live `Workspace`), with its index."""

    source: Any  # SnapshotView | Workspace: a NodeSource
    snapshot_path: Path
    folder: Path | None = None
    index: Any = None  # SearchIndex | None
    manifest: dict[str, Any] = field(default_factory=dict)
    version: int = 0  # the online version opened (0: the build itself; see docs/online.md)

    @property
    def writable(self) -> bool:
        return isinstance(self.source, Workspace)


def snapshot_path(target: str | Path) -> Path:
    """The snapshot file of a build folder, or `target` itself when it is a Parquet file."""
    path = Path(target)
    if path.is_dir():
        snap = path / SNAPSHOT
        if not snap.is_file():
            raise WorkspaceError(f"{path} has no {SNAPSHOT}; pass a folder written by `librarian build` "
                                 "or a snapshot .parquet file")
        return snap
    if path.is_file():
        return path
    raise WorkspaceError(f"{str(target)!r}: no such workspace folder or snapshot file")


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise WorkspaceError(f"{path} is not JSON ({exc.msg})") from None
    return data if isinstance(data, dict) else {}


def index_folder(folder: Path, manifest: dict[str, Any]) -> Path:
    """The index folder `workspace.json` names, which must lie inside the build folder.

    A relative name that resolves (links followed) outside `folder`, an
    absolute path, or a value that is not a string raises `WorkspaceError`.
    """
    name = manifest.get("index", INDEX)
    if not isinstance(name, str) or not name.strip():
        raise WorkspaceError(f"{folder / MANIFEST}: 'index' must be a folder name, got {name!r}")
    root = folder.resolve()
    target = (root / name).resolve()
    if Path(name).is_absolute() or not target.is_relative_to(root) or target == root:
        raise WorkspaceError(f"{folder / MANIFEST}: 'index' is {name!r}, which is outside the build folder {root}; "
                             "an index is only read from inside the folder it was built in")
    return target


def open_workspace(target: str | Path, writable: bool = False, with_index: bool = True,
                   embedder: str | None = None) -> OpenedWorkspace:
    """Open a build folder or snapshot file; load the saved index beside it when there is one.

    `embedder` overrides the one the build recorded ('none' serves BM25 only,
    which needs no model).
    """
    snap = snapshot_path(target)
    folder = snap.parent if Path(target).is_dir() or (snap.parent / MANIFEST).is_file() else None
    manifest = read_manifest(folder) if folder is not None else {}
    version = 0
    if Path(target).is_dir():  # a folder curated online opens at the version its HEAD names
        store = VersionStore(target)
        version = store.head()
        if version and writable:
            raise WorkspaceError(f"{target} serves curated version {version} (online/HEAD.json); versions are never "
                                 f"edited in place: roll back to 0 first (`librarian rollback {target} 0`) or serve "
                                 "it read-only")
        snap = store.paths(version).snapshot
    if writable:
        source: Any = Workspace.from_state(*codec.read_parquet(snap))
    else:
        source = SnapshotView.from_parquet(snap)
    index = None
    index_dir = snap.parent / INDEX if version else index_folder(snap.parent, manifest)
    if with_index and (index_dir / "manifest.json").is_file():
        name = embedder if embedder is not None else manifest.get("search", {}).get("embedder", "none")
        dim = manifest.get("search", {}).get("hashing_dim", 64)
        index = EmbeddedIndex.load(index_dir, make_embedder(name, dim))
        if name not in (None, "none"):
            index.refresh(embed=True)
    return OpenedWorkspace(source, snap, folder, index, manifest, version)
