"""The versions of a workspace that curates itself online, on disk beside the build.

Layout (W is a build folder: `snapshot.parquet`, `trace.parquet`, `index/`):

    W/online/HEAD.json                   {"version": N, "at": ..., "reason": ...}: the version served
    W/online/versions/v000003/           one folder per version, never changed once written:
        snapshot.parquet                 the workspace
        trace.parquet                    the ops that made it from its parent version
        index/                           its search index
        version.json                     parent, ops, snapshot hash, the questions and the check that let it in

Version 0 is the build itself. A version folder is written under a temporary
name and renamed into place, then HEAD is replaced (write + rename): a crash
leaves either the old HEAD or the new one, never a half-written version.
Replaying a version's trace over its parent's snapshot gives its snapshot;
`full_trace` chains them from the build's own trace.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from librarian.workspace import TraceEntry, Workspace, codec, read_trace, write_trace
from librarian.workspace.errors import WorkspaceError

ONLINE = "online"
HEAD = "HEAD.json"
VERSIONS = "versions"
INFO = "version.json"
SNAPSHOT, TRACE, INDEX, MANIFEST = "snapshot.parquet", "trace.parquet", "index", "workspace.json"


@dataclass(frozen=True, slots=True)
class VersionPaths:
    """Where one version's files are."""

    version: int
    snapshot: Path
    trace: Path
    index: Path


def version_name(version: int) -> str:
    return f"v{version:06d}"


def _atomic_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class VersionStore:
    """The versions of the build folder `folder` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        if not (self.folder / SNAPSHOT).is_file():
            raise WorkspaceError(f"{self.folder} is not a build folder (no {SNAPSHOT}); online curation needs the "
                                 "folder `librarian build` wrote")
        self.root = self.folder / ONLINE

    # ----- reading
    def head(self) -> int:
        """The version being served (0, the build, when no curation was ever swapped in)."""
        path = self.root / HEAD
        if not path.is_file():
            return 0
        try:
            version = json.loads(path.read_text(encoding="utf-8"))["version"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise WorkspaceError(f"{path} is unreadable ({exc}); restore it or delete it to serve version 0") from None
        if not isinstance(version, int) or not self.exists(version):
            raise WorkspaceError(f"{path} names version {version!r}, which is not in {self.root / VERSIONS}")
        return version

    def exists(self, version: int) -> bool:
        return version == 0 or (self.root / VERSIONS / version_name(version) / INFO).is_file()

    def numbers(self) -> list[int]:
        """Every complete version, in order (0 first)."""
        folder = self.root / VERSIONS
        found = [] if not folder.is_dir() else [
            int(p.name[1:]) for p in folder.iterdir() if p.name[:1] == "v" and p.name[1:].isdigit() and (p / INFO).is_file()]
        return [0, *sorted(found)]

    def paths(self, version: int) -> VersionPaths:
        """The files of `version`; an unknown one raises `WorkspaceError` naming those there are."""
        if not self.exists(version):
            raise WorkspaceError(f"{self.folder} has no version {version}; versions: "
                                 + ", ".join(map(str, self.numbers())))
        if version == 0:
            return VersionPaths(0, self.folder / SNAPSHOT, self.folder / TRACE, self._base_index())
        at = self.root / VERSIONS / version_name(version)
        return VersionPaths(version, at / SNAPSHOT, at / TRACE, at / INDEX)

    def _base_index(self) -> Path:
        manifest = {}
        if (self.folder / MANIFEST).is_file():
            try:
                manifest = json.loads((self.folder / MANIFEST).read_text(encoding="utf-8"))
            except ValueError:
                manifest = {}
        name = manifest.get("index", INDEX) if isinstance(manifest, dict) else INDEX
        root = self.folder.resolve()
        target = (root / str(name)).resolve()
        if Path(str(name)).is_absolute() or not target.is_relative_to(root) or target == root:
            raise WorkspaceError(f"{self.folder / MANIFEST}: 'index' is {name!r}, outside the build folder")
        return target

    def info(self, version: int) -> dict[str, Any]:
        """What `version.json` records (for version 0: the build)."""
        if version == 0 and self.exists(0):
            return {"version": 0, "parent": None, "reason": "the build", "ops": 0}
        path = self.paths(version).snapshot.parent / INFO
        return json.loads(path.read_text(encoding="utf-8"))

    def load(self, version: int) -> Workspace:
        """The workspace of `version` (a live object; callers serving it must not edit it)."""
        return Workspace.from_state(*codec.read_parquet(self.paths(version).snapshot))

    def trace(self, version: int) -> list[TraceEntry]:
        """The ops that made `version` from its parent (for 0: the build's trace, if it kept one)."""
        path = self.paths(version).trace
        return read_trace(path) if path.is_file() else []

    def lineage(self, version: int) -> list[int]:
        """The versions from 0 to `version` along parent links."""
        chain = [version]
        while chain[-1] != 0:
            parent = self.info(chain[-1]).get("parent")
            if not isinstance(parent, int) or parent in chain:
                raise WorkspaceError(f"version {chain[-1]} has no valid parent ({parent!r})")
            chain.append(parent)
        return chain[::-1]

    def full_trace(self, version: int) -> list[TraceEntry]:
        """Every op from the build's initial store to `version` (replayable over `initial.parquet`)."""
        return [entry for v in self.lineage(version) for entry in self.trace(v)]

    # ----- writing
    def commit(self, ws: Workspace, parent: int, save_index: Any, info: dict[str, Any]) -> int:
        """Write `ws` (its trace: the ops since `parent`) as a new version; returns its number. HEAD is unchanged.

        `save_index(folder)` writes the version's search index.
        """
        versions = self.root / VERSIONS
        versions.mkdir(parents=True, exist_ok=True)
        tmp = versions / f".tmp-{uuid.uuid4().hex[:12]}"
        tmp.mkdir()
        try:
            codec.write_parquet(*ws.state(), tmp / SNAPSHOT)
            write_trace(ws.trace, tmp / TRACE)
            save_index(tmp / INDEX)
            number = self.numbers()[-1] + 1
            for _ in range(100):  # another process may take a number first: the rename then fails
                record = {**info, "version": number, "parent": parent, "ops": ws.version,
                          "snapshot_hash": ws.content_hash(), "step": ws.meta.step, "created": time.time()}
                _atomic_json(tmp / INFO, record)
                try:
                    os.rename(tmp, versions / version_name(number))
                    return number
                except OSError:
                    number += 1
            raise WorkspaceError(f"could not find a free version number in {versions}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def set_head(self, version: int, reason: str) -> None:
        """Serve `version` from now on (an unknown version raises `WorkspaceError`; nothing changes)."""
        self.paths(version)
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic_json(self.root / HEAD, {"version": version, "at": time.time(), "reason": reason})
