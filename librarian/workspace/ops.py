"""Typed ops: every change to a workspace is one of these.

Ops are plain data. `op_from_dict` parses an agent's or a trace's payload and
raises `WorkspaceError` (never anything else) when it is malformed: a wrong
type, text over `MAX_TEXT_CHARS`, a lone surrogate anywhere, or a control
character (`workspace.text`: only newline and tab in text, none in ids and paths).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from librarian.workspace.errors import WorkspaceError
from librarian.workspace.text import check_name, check_text

MAX_TEXT_CHARS = 100_000
MAX_LINK_MANY_TARGETS = 40  # also the most links one `add` may carry


@dataclass(frozen=True, slots=True)
class Op:
    """Base class; `name` is the op's wire name."""

    name: ClassVar[str] = "op"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able payload that `op_from_dict` turns back into this op."""
        out: dict[str, Any] = {"op": self.name}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True, slots=True)
class Add(Op):
    """A new synthetic document (KBGym add). Path defaults to the new id."""

    name: ClassVar[str] = "add"
    text: str
    path: str | None = None
    links: tuple[str, ...] = ()
    provenance: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Edit(Op):
    """Replace a node's text (a directory's README)."""

    name: ClassVar[str] = "edit"
    target: str
    text: str


@dataclass(frozen=True, slots=True)
class Delete(Op):
    """Remove a node from the active workspace; edges to it are removed too."""

    name: ClassVar[str] = "delete"
    target: str


@dataclass(frozen=True, slots=True)
class Link(Op):
    """One directed navigation edge source -> target."""

    name: ClassVar[str] = "link"
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class LinkMany(Op):
    """Up to 40 edges from one source; more is rejected, never truncated."""

    name: ClassVar[str] = "link_many"
    source: str
    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Unlink(Op):
    """Remove the edge source -> target."""

    name: ClassVar[str] = "unlink"
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class Move(Op):
    """Move a node (and everything nested under it) to a new path."""

    name: ClassVar[str] = "move"
    target: str
    new_path: str


@dataclass(frozen=True, slots=True)
class MakeDir(Op):
    """A new directory; its text is its README."""

    name: ClassVar[str] = "make_dir"
    path: str
    readme: str = ""


@dataclass(frozen=True, slots=True)
class CreateFile(Op):
    """A new synthetic file whose provenance links to the sources it was made from."""

    name: ClassVar[str] = "create_file"
    path: str
    text: str
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MergeFiles(Op):
    """A parent summary at `path` that links its children and nests them under it."""

    name: ClassVar[str] = "merge_files"
    children: tuple[str, ...]
    path: str
    text: str


@dataclass(frozen=True, slots=True)
class AddDocument(Op):
    """Ingest one more raw document (a JAM session appended, a corpus grown). Not an agent tool.

    The path defaults to the id and the origin to the id, as in `Workspace.from_documents`.
    """

    name: ClassVar[str] = "add_document"
    id: str
    text: str
    path: str | None = None
    origin: str | None = None


OP_TYPES: dict[str, type[Op]] = {
    cls.name: cls
    for cls in (Add, Edit, Delete, Link, LinkMany, Unlink, Move, MakeDir, CreateFile, MergeFiles, AddDocument)
}

_LIST_FIELDS = {"links", "provenance", "targets", "sources", "children"}
_OPTIONAL_FIELDS = {"path", "origin"}
_TEXT_FIELDS = {"text", "readme"}


def _check_field(op_name: str, field_name: str, value: Any) -> Any:
    if field_name in _LIST_FIELDS:
        if not isinstance(value, list | tuple):
            raise WorkspaceError(f"{op_name}: '{field_name}' must be a list of ids, got {type(value).__name__}")
        for item in value:
            if not isinstance(item, str):
                raise WorkspaceError(f"{op_name}: every entry of '{field_name}' must be a string, got {type(item).__name__}")
            check_name(item, f"{op_name}: an entry of '{field_name}'")
        return tuple(value)
    if value is None and field_name in _OPTIONAL_FIELDS:
        return None
    if not isinstance(value, str):
        raise WorkspaceError(f"{op_name}: '{field_name}' must be a string, got {type(value).__name__}")
    if field_name in _TEXT_FIELDS:
        if len(value) > MAX_TEXT_CHARS:
            raise WorkspaceError(f"{op_name}: '{field_name}' is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
        return check_text(value, f"{op_name}: '{field_name}'")
    return check_name(value, f"{op_name}: '{field_name}'")


def _names(keys: list[Any]) -> str:
    """Argument names for an error message: quoted, cut short, at most five."""
    shown = [repr(str(k)[:40]) for k in keys[:5]]
    return ", ".join(shown) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def op_from_dict(payload: Any) -> Op:
    """Parse `{"op": name, ...fields}` into an op, or raise `WorkspaceError` naming the problem."""
    if not isinstance(payload, dict):
        raise WorkspaceError(f"an op must be a JSON object, got {type(payload).__name__}")
    name = payload.get("op")
    if not isinstance(name, str) or name not in OP_TYPES:
        known = ", ".join(sorted(OP_TYPES))
        shown = repr(name[:40]) if isinstance(name, str) else f"of type {type(name).__name__}"
        raise WorkspaceError(f"unknown op {shown}; 'op' must be one of: {known}")
    cls = OP_TYPES[name]
    wanted = {f.name: f for f in fields(cls)}
    extra = sorted((k for k in payload if k not in wanted and k != "op"), key=str)
    if extra:
        raise WorkspaceError(f"{name}: unexpected argument(s) {_names(extra)}; expected {', '.join(wanted)}")
    kwargs: dict[str, Any] = {}
    for field_name, f in wanted.items():
        if field_name not in payload:
            if f.default is not MISSING:
                continue
            raise WorkspaceError(f"{name}: missing argument '{field_name}'")
        kwargs[field_name] = _check_field(name, field_name, payload[field_name])
    return cls(**kwargs)
