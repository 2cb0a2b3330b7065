"""Workspaces from a folder on disk, and export to a real folder tree a person can walk.

`documents_from_folder` turns matching files into `Document`s (id and path =
the relative POSIX path). `export_folder` writes every active node of a
`NodeSource` as a file with YAML front matter (id, kind, links, provenance);
a node with nested children becomes a folder whose own text goes to
`README.md` inside it. The export is written to a temporary folder next to
the target and renamed into place, so a failure leaves nothing half written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import yaml

from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Document, Node, NodeSource

README = "README.md"
FRONT_MATTER_FENCE = "---"


def documents_from_folder(
    folder: str | os.PathLike[str], patterns: Iterable[str] = ("*.txt", "*.md")
) -> list[Document]:
    """One `Document` per file under `folder` matching any glob in `patterns`, sorted by path.

    Hidden files and anything under a hidden folder (a name starting with
    '.') are skipped. A file that cannot be read or is not UTF-8 raises
    `WorkspaceError` naming it.
    """
    root = Path(folder)
    if not root.is_dir():
        raise WorkspaceError(f"{str(folder)!r} is not a folder")
    patterns = tuple(patterns)
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise WorkspaceError(f"patterns must be non-empty glob strings, got {patterns!r}")
    found: dict[str, Path] = {}
    for pattern in patterns:
        for file in root.rglob(pattern):
            rel = file.relative_to(root).as_posix()
            if any(part.startswith(".") for part in PurePosixPath(rel).parts) or not file.is_file():
                continue
            found[rel] = file
    docs = []
    for rel in sorted(found):
        try:
            text = found[rel].read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise WorkspaceError(f"{found[rel]} is not UTF-8 text (byte {err.start}); convert it or leave it out") from None
        except OSError as err:
            raise WorkspaceError(f"cannot read {found[rel]}: {err.strerror or err}") from None
        docs.append(Document(id=rel, text=text, path=rel))
    return docs


def front_matter(node: Node) -> str:
    """The YAML front matter block written at the top of an exported file."""
    data = {"id": node.id, "kind": node.kind, "links": list(node.links), "provenance": list(node.provenance)}
    body = yaml.safe_dump(data, allow_unicode=True, sort_keys=False, default_flow_style=None, width=1_000_000)
    return f"{FRONT_MATTER_FENCE}\n{body}{FRONT_MATTER_FENCE}\n"


def split_front_matter(content: str) -> tuple[dict[str, object], str]:
    """(front matter, text) of an exported file; ({}, content) when it has none."""
    head = FRONT_MATTER_FENCE + "\n"
    if not content.startswith(head):
        return {}, content
    end = content.find("\n" + head, len(head) - 1)
    if end < 0:
        return {}, content
    data = yaml.safe_load(content[len(head) : end + 1]) or {}
    if not isinstance(data, dict):
        return {}, content
    return data, content[end + 1 + len(head) :]


def _safe_parts(path: str) -> list[str]:
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts) or "\\" in path or "\x00" in path:
        raise WorkspaceError(f"node path {path!r} cannot be written as a file (empty name, '.', '..' or backslash)")
    return parts


def _layout(nodes: list[Node]) -> dict[str, tuple[Node, bool]]:
    """Map each node to its file path relative to the export root, and whether it is a folder README."""
    folders = {n.parent_path for n in nodes} | {n.path for n in nodes if n.kind == "directory"}
    taken = {n.path for n in nodes}
    files: dict[str, tuple[Node, bool]] = {}
    for node in nodes:
        _safe_parts(node.path)
        if node.path in folders:
            name, i = README, 0
            while f"{node.path}/{name}" in taken:
                i += 1
                name = f"README-{i}.md"
            files[f"{node.path}/{name}"] = (node, True)
        else:
            files[node.path] = (node, False)
    return files


def export_folder(src: NodeSource, folder: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Write every active node of `src` under `folder` as files with front matter; returns the folder.

    Refuses a non-empty `folder` unless `overwrite=True` (then its old
    contents are replaced). Written atomically via a temporary sibling folder.
    """
    target = Path(folder)
    if target.exists() and not target.is_dir():
        raise WorkspaceError(f"{str(folder)!r} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise WorkspaceError(f"{str(folder)!r} is not empty; pass overwrite=True to replace its contents")
    layout = _layout(list(src))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.export-"))
    try:
        for rel, (node, _is_readme) in sorted(layout.items()):
            out = tmp.joinpath(*rel.split("/"))
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                out.write_text(front_matter(node) + node.text, encoding="utf-8")
            except UnicodeEncodeError as err:
                raise WorkspaceError(f"node {node.id!r} ({node.path}) has text that is not valid Unicode: {err}") from None
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.rename(target, old)
        try:
            os.rename(tmp, target)
        except BaseException:
            if old is not None:
                os.rename(old, target)
            raise
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
