"""The Librarian builder's tools (paper 000): create_file, merge_files, delete, stop (plus list / read)."""

from __future__ import annotations

from typing import Any

from librarian.roles.content_executor import EXECUTOR_KEY, Source
from librarian.roles.curator_tools import apply_op
from librarian.roles.tools import (
    LIBRARIAN_BUILDER,
    STRING,
    Tool,
    ToolContext,
    ToolInputError,
    ToolResult,
    params,
)
from librarian.workspace import views
from librarian.workspace.ops import CreateFile, Delete, MergeFiles

_PATHS = {"type": "array", "items": STRING, "minItems": 1}


def _text(ctx: ToolContext, a: dict[str, Any], refs: list[str], tool: str) -> str:
    """The builder's own text, or (when it leaves `text` out) the attached content executor's, from the sources."""
    if a.get("text"):
        return a["text"]

    executor = ctx.extra.get(EXECUTOR_KEY)
    if executor is None:
        raise ToolInputError(f"{tool} needs text: no content executor is attached to write it from the sources")
    nodes = [views.resolve(ctx.workspace, r) for r in refs]
    return executor(a["path"], [Source.of(n) for n in nodes], a.get("instruction", ""))


def _create(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    text = _text(ctx, a, a["sources"], "create_file")
    return apply_op(ctx, CreateFile(path=a["path"], text=text, sources=tuple(a["sources"])))


def _merge(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    text = _text(ctx, a, a["children"], "merge_files")
    return apply_op(ctx, MergeFiles(children=tuple(a["children"]), path=a["path"], text=text))


def _delete(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return apply_op(ctx, Delete(target=a["path"]))


def _stop(_ctx: ToolContext, _a: dict[str, Any]) -> ToolResult:
    return ToolResult("build stopped", terminal=True)


_B = frozenset({LIBRARIAN_BUILDER})
CREATE_FILE = Tool(
    "builder.create_file", "create_file",
    "Create a synthetic file at a path from source documents; the file records them as its provenance.",
    params(["path", "sources"], path={**STRING, "description": "new file path, e.g. people/alice.md"},
           text={**STRING, "description": "the file's content (left out: the content executor writes it)"},
           instruction={**STRING, "description": "what the content executor should focus on (without text)"},
           sources={**_PATHS, "description": "paths or ids of the documents it consolidates"}),
    _B, _create)
MERGE_FILES = Tool(
    "builder.merge_files", "merge_files",
    "Write a summary file at a path that links the given synthetic files and nests them under it.",
    params(["children", "path"], path={**STRING, "description": "path of the summary file"},
           children={**_PATHS, "description": "synthetic files to merge"},
           text={**STRING, "description": "the summary's content (left out: the content executor writes it)"},
           instruction={**STRING, "description": "what the content executor should focus on (without text)"}),
    _B, _merge)
DELETE_FILE = Tool("builder.delete", "delete", "Delete a synthetic file (raw documents cannot be deleted).",
                   params(["path"], path={**STRING, "description": "file path or id"}), _B, _delete)
STOP = Tool("builder.stop", "stop", "Finish building the workspace.", params(), _B, _stop, terminal=True)

BUILDER_TOOLS: tuple[Tool, ...] = (CREATE_FILE, MERGE_FILES, DELETE_FILE, STOP)
