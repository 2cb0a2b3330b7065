"""The KBGym curator's editing tools (paper 001 Table I), mapped onto workspace ops.

Every edit goes through `Workspace.apply`, so the op is validated and
atomic; an added document is named after its text (`people-whose-job-is-optician`); a rejected op's `WorkspaceError` message is the observation. After
an applied edit the search index follows (BM25 at once).
"""

from __future__ import annotations

from typing import Any

from librarian.roles.tools import ANY_STRING, ID, KBGYM_CURATOR, STRING, Tool, ToolContext, ToolResult, params
from librarian.workspace.ops import Add, Delete, Edit, Link, LinkMany, Op, Unlink
from librarian.workspace.paths import name_from_text


def apply_op(ctx: ToolContext, op: Op) -> ToolResult:
    """Apply `op` to the live workspace; the result message is the observation."""
    result = ctx.writable().apply(op)
    ctx.after_edit()
    return ToolResult(result.message, changed=True)


def content_path(ws: Any, text: str) -> str:
    """The text's words as a top-level name, suffixed -2, -3, ... when that path is taken in `ws`."""
    base = name_from_text(text)
    path, n = base, 1
    while ws.id_at(path) is not None:
        n += 1
        path = f"{base}-{n}"
    return path


def _add(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    ws = ctx.writable()
    return apply_op(ctx, Add(text=a["text"], links=tuple(a.get("links", ())), path=content_path(ws, str(a["text"]))))


def _edit(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return apply_op(ctx, Edit(target=a["id"], text=a["text"]))


def _delete(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return apply_op(ctx, Delete(target=a["id"]))


def _link(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return apply_op(ctx, Link(source=a["source"], target=a["target"]))


def _link_many(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return apply_op(ctx, LinkMany(source=a["source"], targets=tuple(a["targets"])))


def _unlink(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return apply_op(ctx, Unlink(source=a["source"], target=a["target"]))


def _done(_ctx: ToolContext, _a: dict[str, Any]) -> ToolResult:
    return ToolResult("curation pass ended", terminal=True)


_C = frozenset({KBGYM_CURATOR})
ADD = Tool("kbgym.add", "add",
           "Add a new document (one sentence; an index document names its key and links its members). "
           "A near-duplicate of an existing document is merged into it instead.",
           params(["text"], text={**STRING, "description": "the document's text"},
                  links={"type": "array", "items": ID, "description": "ids to link from the new document"}),
           _C, _add)
EDIT = Tool("kbgym.edit", "edit", "Replace a document's text.",
            params(["id", "text"], id=ID, text={**ANY_STRING, "description": "the new text"}), _C, _edit)
DELETE = Tool("kbgym.delete", "delete", "Remove a document (links to it are removed too).",
              params(["id"], id=ID), _C, _delete)
LINK = Tool("kbgym.link", "link", "Add one directed link source -> target.",
            params(["source", "target"], source=ID, target=ID), _C, _link)
LINK_MANY = Tool("kbgym.link_many", "link_many",
                 "Link one document to up to 40 targets for one action; more than 40 is rejected, not truncated.",
                 params(["source", "targets"], source=ID,
                        targets={"type": "array", "items": ID, "minItems": 1, "description": "target ids"}),
                 _C, _link_many)
UNLINK = Tool("kbgym.unlink", "unlink", "Remove the link source -> target.",
              params(["source", "target"], source=ID, target=ID), _C, _unlink)
DONE = Tool("kbgym.done", "done", "End the curation pass.", params(), _C, _done, terminal=True)

CURATOR_TOOLS: tuple[Tool, ...] = (ADD, EDIT, DELETE, LINK, LINK_MANY, UNLINK, DONE)
