"""Workspaces from a folder on disk, and export to a real folder tree a person can walk.

`scan_folder` turns the matching files under a folder into `Document`s (id
and path = the relative POSIX path) and lists every file it left out with the
reason (hidden, unsupported extension, PDF, binary, not UTF-8, unreadable, a
name the workspace cannot hold, a symlink); nothing is skipped silently, and
nothing outside the folder is read: a symlink is followed only with
`follow_symlinks=True` and only when it resolves inside the folder. A file
longer than `section_chars` is split into sections of bounded size (at
headings first, then at paragraphs, then at lines) that become documents
`<file>/lines-<first>-<last>.<ext>` whose origin is `<file>#L<first>-L<last>`.

`export_folder` writes every active node of a `NodeSource` as a file with
YAML front matter (id, kind, links, provenance); a node with nested children
becomes a folder whose own text goes to `README.md` inside it. The export is
written to a temporary folder next to the target and renamed into place, so a
failure leaves nothing half written.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from tqdm import tqdm

from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Document, Node, NodeSource
from librarian.workspace.paths import normalize_file_path

README = "README.md"
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when PyYAML has it: same YAML, faster
FRONT_MATTER_FENCE = "---"
SECTION_CHARS = 8_000  # files longer than this are split into sections of at most this many characters
_SNIFF_BYTES = 8192
EXPORT_PROGRESS_MIN = 1_000  # exports of this many files or more show a progress bar (with progress=True)
_HEADING = re.compile(r"^#{1,6}(?:\s|$)")

# reasons a file is left out (the keys of `FolderScan.counts`)
HIDDEN = "hidden"
UNSUPPORTED = "unsupported extension"
PDF = "PDF (convert it to text first)"
BINARY = "binary"
NOT_UTF8 = "not UTF-8 text"
UNREADABLE = "unreadable"
BAD_NAME = "bad name"
LINK_OUTSIDE = "symlink outside the folder"
LINK_NOT_FOLLOWED = "symlink (not followed without --follow-symlinks)"
LINK_BROKEN = "broken symlink or loop"
NOT_A_FILE = "not a regular file"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file (or folder) left out of a scan, and why."""

    path: str  # relative to the scanned folder, as it is named on disk
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class FolderScan:
    """What a folder yielded: documents, the files left out, and the files split into sections."""

    documents: list[Document] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    sections: dict[str, int] = field(default_factory=dict)  # file -> number of sections it was split into

    @property
    def counts(self) -> dict[str, int]:
        """Skipped entries per reason."""
        out: dict[str, int] = {}
        for s in self.skipped:
            out[s.reason] = out.get(s.reason, 0) + 1
        return out


@dataclass(frozen=True, slots=True)
class Section:
    """Lines `first`..`last` (1-based, inclusive) of a file, with their text."""

    first: int
    last: int
    text: str


def _blocks(lines: Iterable[str]) -> Iterator[tuple[int, list[str], bool]]:
    """(first line, lines, starts with a heading): paragraphs, a heading always opening a new one."""
    block: list[str] = []
    first, heading, blank_run = 1, False, False
    n = 0
    for n, line in enumerate(lines, start=1):
        is_heading = bool(_HEADING.match(line))
        blank = not line.strip()
        if block and (is_heading or (blank_run and not blank)):
            yield first, block, heading
            block, first, heading = [], n, False
        if not block:
            first, heading = n, is_heading
        block.append(line)
        blank_run = blank
    if block:
        yield first, block, heading


def _cut(first: int, lines: list[str], max_chars: int) -> Iterator[Section]:
    """A block longer than `max_chars` as sections of whole lines (a longer line is cut by characters)."""
    buf: list[str] = []
    size, start = 0, first
    for i, line in enumerate(lines):
        n = first + i
        if buf and size + len(line) > max_chars:
            yield Section(start, n - 1, "".join(buf))
            buf, size = [], 0
        if not buf:
            start = n
        if len(line) > max_chars:
            for at in range(0, len(line), max_chars):
                yield Section(n, n, line[at:at + max_chars])
            continue
        buf.append(line)
        size += len(line)
    if buf:
        yield Section(start, first + len(lines) - 1, "".join(buf))


def split_sections(lines: Iterable[str], max_chars: int = SECTION_CHARS) -> Iterator[Section]:
    """Consecutive sections of at most `max_chars` characters covering every line, in order.

    A section ends before a heading once it holds half of `max_chars`,
    and before any paragraph that would take it past `max_chars`; a paragraph
    longer than that is cut at lines. The sections' texts concatenate to the
    input. Lines are consumed as they come, so a file can be streamed.
    """
    if max_chars < 1:
        raise WorkspaceError(f"section size must be at least 1 character, got {max_chars}")
    buf: list[str] = []
    size, start, last = 0, 1, 0
    for first, block, heading in _blocks(lines):
        chars = sum(len(x) for x in block)
        if buf and ((heading and size >= max_chars // 2) or size + chars > max_chars):
            yield Section(start, last, "".join(buf))
            buf, size = [], 0
        if chars > max_chars:
            yield from _cut(first, block, max_chars)
            last = first + len(block) - 1
            continue
        if not buf:
            start = first
        buf.append("".join(block))
        size += chars
        last = first + len(block) - 1
    if buf:
        yield Section(start, last, "".join(buf))


def _section_documents(rel: str, sections: Iterable[Section]) -> list[Document]:
    """One document per section: `<file>/lines-<first>-<last>.<ext>` (`-part<k>` for the pieces of one long line)."""
    stem, dot, ext = rel.rpartition("/")[2].rpartition(".")
    suffix = f".{ext}" if dot and stem else ""
    docs: list[Document] = []
    part, previous = 0, (0, 0)
    for s in sections:
        part = part + 1 if (s.first, s.last) == previous else 0
        previous = (s.first, s.last)
        if part == 1:  # the line was cut: its first piece becomes part 1 as well
            first = docs.pop()
            docs.append(_section_document(rel, s.first, s.last, suffix, first.text, 1))
        docs.append(_section_document(rel, s.first, s.last, suffix, s.text, part + 1 if part else 0))
    return docs


def _section_document(rel: str, first: int, last: int, suffix: str, text: str, part: int) -> Document:
    name = f"{rel}/lines-{first:06d}-{last:06d}" + (f"-part{part:03d}" if part else "") + suffix
    return Document(id=name, text=text, path=name, origin=f"{rel}#L{first}-L{last}")


def _shown(rel: str) -> str:
    """A name safe to print: escaped when it holds control, invisible or undecodable characters."""
    return rel if rel.isprintable() else ascii(rel)[1:-1]


def _walk(root: Path, follow_symlinks: bool, scan: FolderScan) -> Iterator[tuple[str, Path]]:
    """(relative path, real file) for each regular file under `root`, never leaving it; the rest is recorded."""
    real_root = root.resolve()
    seen = {real_root}
    stack: list[tuple[Path, str]] = [(real_root, "")]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as err:
            scan.skipped.append(Skipped(rel or ".", UNREADABLE, err.strerror or str(err)))
            continue
        subfolders: list[tuple[Path, str]] = []
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name.startswith("."):
                scan.skipped.append(Skipped(name + ("/" if entry.is_dir(follow_symlinks=False) else ""), HIDDEN))
                continue
            path = Path(entry.path)
            if entry.is_symlink():
                try:
                    target = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    scan.skipped.append(Skipped(name, LINK_BROKEN))
                    continue
                if not target.is_relative_to(real_root):
                    scan.skipped.append(Skipped(name, LINK_OUTSIDE, f"-> {target}"))
                    continue
                if any(part.startswith(".") for part in target.relative_to(real_root).parts):
                    scan.skipped.append(Skipped(name, HIDDEN, "a link to a hidden file or folder"))
                    continue
                if not follow_symlinks:
                    scan.skipped.append(Skipped(name, LINK_NOT_FOLLOWED))
                    continue
                if target.is_dir():
                    if target in seen:
                        scan.skipped.append(Skipped(name, LINK_BROKEN, "a folder already scanned"))
                    else:
                        seen.add(target)
                        subfolders.append((target, name))
                elif target.is_file():
                    yield name, target
                else:
                    scan.skipped.append(Skipped(name, NOT_A_FILE))
            elif entry.is_dir(follow_symlinks=False):
                subfolders.append((path, name))
            elif entry.is_file(follow_symlinks=False):
                yield name, path
            else:
                scan.skipped.append(Skipped(name, NOT_A_FILE))
        stack.extend(reversed(subfolders))


def _looks_binary(head: bytes) -> bool:
    """A NUL byte, or more than a tenth of control bytes other than tab, newline, form feed and return."""
    controls = sum(1 for byte in head if byte < 32 and byte not in (9, 10, 12, 13))
    return b"\x00" in head or controls > len(head) / 10


def _read(rel: str, file: Path, section_chars: int, strict: bool) -> tuple[list[Document], Skipped | None]:
    """The documents of one file, or why it was left out (`strict`: raise instead for text it cannot read)."""
    try:
        with open(file, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
        if head.startswith(b"%PDF-"):
            return [], Skipped(rel, PDF)
        if _looks_binary(head):
            return [], Skipped(rel, BINARY)
        if os.path.getsize(file) <= section_chars:
            text = file.read_text(encoding="utf-8")
            return [Document(id=rel, text=text, path=rel)], None
        with open(file, encoding="utf-8") as fh:  # streamed: a huge file is never held as one string
            docs = _section_documents(rel, split_sections(fh, section_chars))
    except UnicodeDecodeError as err:
        if strict:
            raise WorkspaceError(f"{file} is not UTF-8 text (byte {err.start}); convert it or leave it out") from None
        return [], Skipped(rel, NOT_UTF8, f"byte {err.start}" if os.path.getsize(file) <= section_chars else "")
    except OSError as err:
        if strict:
            raise WorkspaceError(f"cannot read {file}: {err.strerror or err}") from None
        return [], Skipped(rel, UNREADABLE, err.strerror or str(err))
    if sum(len(d.text) for d in docs) <= section_chars:  # within the bound after all (multi-byte characters)
        return [Document(id=rel, text="".join(d.text for d in docs), path=rel)], None
    return docs, None


def scan_folder(folder: str | os.PathLike[str], patterns: Iterable[str] = ("*.txt", "*.md"),
                follow_symlinks: bool = False, section_chars: int = SECTION_CHARS,
                strict: bool = False) -> FolderScan:
    """The documents under `folder` from files whose name matches a glob in `patterns`, sorted by path.

    Everything else is listed in `skipped` with its reason. `strict=True`
    raises `WorkspaceError` for a matching file that cannot be read or is not
    UTF-8 instead of skipping it.
    """
    root = Path(folder)
    if not root.is_dir():
        raise WorkspaceError(f"{str(folder)!r} is not a folder")
    patterns = tuple(patterns)
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise WorkspaceError(f"patterns must be non-empty glob strings, got {patterns!r}")
    if section_chars < 1:
        raise WorkspaceError(f"section_chars must be at least 1, got {section_chars}")
    scan = FolderScan()
    files = sorted(_walk(root, follow_symlinks, scan))
    for rel, file in files:
        if not any(fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], p) for p in patterns):
            suffix = Path(rel).suffix.lower()
            scan.skipped.append(Skipped(rel, PDF) if suffix == ".pdf" else Skipped(rel, UNSUPPORTED, suffix or "none"))
            continue
        try:
            if normalize_file_path(rel) != rel:
                raise WorkspaceError(f"{rel!r} has a name with surrounding spaces")
        except WorkspaceError as err:
            scan.skipped.append(Skipped(rel, BAD_NAME, str(err)))
            continue
        docs, skipped = _read(rel, file, section_chars, strict)
        if skipped is not None:
            scan.skipped.append(skipped)
        scan.documents.extend(docs)
        if len(docs) > 1:
            scan.sections[rel] = len(docs)
    scan.skipped = sorted((Skipped(_shown(s.path), s.reason, _shown(s.detail)) for s in scan.skipped),
                          key=lambda s: s.path)
    return scan


def documents_from_folder(
    folder: str | os.PathLike[str], patterns: Iterable[str] = ("*.txt", "*.md")
) -> list[Document]:
    """One `Document` per file under `folder` matching any glob in `patterns` (huge files: per section).

    Files left out by `scan_folder` (hidden, other extensions, binary, bad
    names, symlinks) are dropped; a matching file that cannot be read or is
    not UTF-8 raises `WorkspaceError` naming it.
    """
    return scan_folder(folder, patterns, strict=True).documents


def front_matter(node: Node) -> str:
    """The YAML front matter block written at the top of an exported file."""
    data = {"id": node.id, "kind": node.kind, "links": list(node.links), "provenance": list(node.provenance)}
    body = yaml.dump(data, Dumper=_DUMPER, allow_unicode=True, sort_keys=False, default_flow_style=None,
                     width=1_000_000)
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


def export_folder(src: NodeSource, folder: str | os.PathLike[str], overwrite: bool = False,
                  progress: bool = False) -> Path:
    """Write every active node of `src` under `folder` as files with front matter; returns the folder.

    Refuses a non-empty `folder` unless `overwrite=True` (then its old
    contents are replaced). Written atomically via a temporary sibling folder.
    `progress`: a progress bar on stderr when there are many files.
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
        files = tqdm(sorted(layout.items()), desc="exporting", unit="file", file=sys.stderr, mininterval=0.5,
                     disable=not progress or len(layout) < EXPORT_PROGRESS_MIN)
        for rel, (node, _is_readme) in files:
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
