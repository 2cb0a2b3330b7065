"""Path and id rules: workspace paths are relative POSIX paths that cannot escape."""

from __future__ import annotations

import unicodedata

from librarian.workspace.errors import WorkspaceError

MAX_PATH_CHARS = 1024
MAX_NAME_CHARS = 255
MAX_ID_CHARS = 256


def _has_control(text: str) -> bool:
    if text.isprintable():  # fast path: no Cc/Cf/Zl/Zp/unassigned characters at all
        return False
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in text)


def normalize_path(path: object) -> str:
    """Return the canonical form of a workspace path, or raise `WorkspaceError`.

    Accepts 'a/b', './a//b/', '/'-free relative paths; rejects '..', absolute
    paths, backslashes, empty names and control characters. '' (or '.') is the
    workspace root.
    """
    if not isinstance(path, str):
        raise WorkspaceError(f"path must be a string, got {type(path).__name__}")
    if len(path) > MAX_PATH_CHARS:
        raise WorkspaceError(f"path is {len(path)} characters long; the limit is {MAX_PATH_CHARS}")
    if _has_control(path):
        raise WorkspaceError(f"path {path!r} contains a control or invisible character; use plain text names")
    if "\\" in path:
        raise WorkspaceError(f"path {path!r} contains a backslash; use '/' to separate names")
    stripped = path.strip()
    if stripped.startswith("/") or stripped.startswith("~"):
        raise WorkspaceError(f"path {path!r} is absolute; paths are relative to the workspace root")
    names: list[str] = []
    for name in stripped.split("/"):
        name = name.strip()
        if name in ("", "."):
            continue
        if name == "..":
            raise WorkspaceError(f"path {path!r} contains '..'; paths cannot leave the workspace")
        if len(name) > MAX_NAME_CHARS:
            raise WorkspaceError(f"a name in {path!r} is longer than {MAX_NAME_CHARS} characters")
        names.append(name)
    return "/".join(names)


def normalize_file_path(path: object) -> str:
    """Like `normalize_path`, but the root ('' or '.') is rejected: a file needs a name."""
    normalized = normalize_path(path)
    if not normalized:
        raise WorkspaceError(f"path {path!r} names the workspace root; give the file a name")
    return normalized


def name_from_text(text: str, limit: int = 60, empty: str = "untitled") -> str:
    """A file name that says what a text is about: its words, lowercased, joined by '-', cut at a word
    boundary within `limit` characters ("People whose job is optician" -> "people-whose-job-is-optician")."""
    words = "".join(ch if ch.isalnum() else " " for ch in text.lower()).split()
    name = ""
    for word in words:
        if len(name) + len(word) + (1 if name else 0) > limit:
            break
        name = f"{name}-{word}" if name else word
    return name or (words[0][:limit] if words else empty)


def parent_of(path: str) -> str:
    """The parent of a normalised path ('' for top-level names)."""
    return path.rsplit("/", 1)[0] if "/" in path else ""


def ancestors(path: str) -> list[str]:
    """All proper ancestors of a normalised path, outermost first, root excluded."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def is_within(path: str, root: str) -> bool:
    """True if `path` is `root` or lies below it."""
    return root == "" or path == root or path.startswith(root + "/")


def validate_id(node_id: object, what: str = "id") -> str:
    """Return the id if it is a usable node id, else raise `WorkspaceError`."""
    if not isinstance(node_id, str):
        raise WorkspaceError(f"{what} must be a string, got {type(node_id).__name__}")
    if not node_id or node_id.strip() != node_id or len(node_id) > MAX_ID_CHARS:
        raise WorkspaceError(f"{what} {node_id[:80]!r} is not a valid id (non-empty, no surrounding spaces, at most {MAX_ID_CHARS} characters)")
    if _has_control(node_id):
        raise WorkspaceError(f"{what} {node_id[:80]!r} contains a control character")
    return node_id
