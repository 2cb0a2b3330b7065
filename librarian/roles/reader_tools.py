"""Reading tools: the KBGym reader's search / read / answer, and the Librarian answerer's list / read / answer."""

from __future__ import annotations

from typing import Any

from librarian.roles.tools import (
    ANY_STRING,
    ID,
    KBGYM_CURATOR,
    KBGYM_READER,
    LIBRARIAN_ANSWERER,
    LIBRARIAN_BUILDER,
    STRING,
    FilteredSource,
    Tool,
    ToolContext,
    ToolInputError,
    ToolResult,
    from_view,
    params,
    touched,
)
from librarian.search.paging import search_page
from librarian.workspace import views
from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import NodeSource
from librarian.workspace.text import terminal_safe


def one_line(text: str, limit: int) -> str:
    """`text` on one line, its control and invisible characters (and lone surrogates) escaped, cut to `limit`:
    what a tool echoes of a query or a hit, so nothing the model reads acts on a terminal or hides text."""
    flat = terminal_safe(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def kbgym_search(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """Five hits per page, each with its id, kind, path and (matched) text."""
    if ctx.index is None:
        raise ToolInputError("search is not available: no search index is attached to this workspace")
    page = search_page(ctx.index, args["query"], args.get("page", 1), mode=ctx.search_mode)  # type: ignore[arg-type]
    query = one_line(args["query"], 200)
    if not page.hits:
        return ToolResult(f'search "{query}" page {page.number}: no hits')
    more = f" (more on page {page.number + 1})" if page.has_more else " (no more pages)"
    noun = "hit" if len(page.hits) == 1 else "hits"
    lines = [f'search "{query}" page {page.number}: {len(page.hits)} {noun}{more}']
    for rank, hit in enumerate(page.hits, start=1):
        lines.append(f"{rank}. id={hit.id}  [{hit.kind}] {hit.path}")
        lines.append(f"   {one_line(hit.text, ctx.snippet_chars)}")
    nodes = [n for n in (ctx.workspace.get(h.id) for h in page.hits) if n is not None]
    return touched("\n".join(lines), nodes)


def kbgym_read(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return from_view(views.read(ctx.workspace, args["id"], mode="kbgym", sources=ctx.read_sources))


def answer(_ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return ToolResult("answer submitted", terminal=True, answer=args["text"])


def _answer_source(ctx: ToolContext) -> NodeSource:
    if ctx.answer_view == "all":
        return ctx.workspace
    return FilteredSource(ctx.workspace, frozenset({"synthetic", "directory"}))


def fs_list(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return from_view(views.ls(_answer_source(ctx), args.get("path", "")))


def fs_read(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    source = _answer_source(ctx)
    if ctx.answer_view == "synthetic+raw_fallback":
        try:
            views.resolve(source, args["path"])
        except WorkspaceError:  # not a visible synthetic file: fall back to the raw document it names
            source = ctx.workspace
    return from_view(views.read(source, args["path"], args.get("start_line", 1), args.get("num_lines")))


SEARCH = Tool(
    "kbgym.search", "search",
    "Search the knowledge base. Returns five documents per page with their ids and text; each page costs one action.",
    params(["query"], query={**STRING, "description": "what to look for"},
           page={"type": "integer", "minimum": 1, "description": "result page, from 1 (default 1)"}),
    frozenset({KBGYM_READER, KBGYM_CURATOR}), kbgym_search,
)
READ_ID = Tool(
    "kbgym.read", "read",
    "Read a document by id: its text, its links, and the full text of every document it links to (one level).",
    params(["id"], id=ID),
    frozenset({KBGYM_READER, KBGYM_CURATOR}), kbgym_read,
)
ANSWER = Tool(
    "answer", "answer",
    "Submit your final answer (short: a name, a number, a list separated by commas). Ends the episode.",
    params(["text"], text={**ANY_STRING, "description": "the answer"}),
    frozenset({KBGYM_READER, LIBRARIAN_ANSWERER}), answer, terminal=True,
)
LIST = Tool(
    "fs.list", "list",
    "List the files and folders directly under a folder ('' is the top).",
    params([], path={**ANY_STRING, "description": "folder path, '' for the top"}),
    frozenset({LIBRARIAN_ANSWERER, LIBRARIAN_BUILDER}), fs_list,
)
READ_LINES = Tool(
    "fs.read", "read",
    "Read a file by path (or id), optionally only some lines. Shows its links and the documents it was made from.",
    params(["path"], path={**STRING, "description": "file path or id"},
           start_line={"type": "integer", "minimum": 1, "description": "first line to show (default 1)"},
           num_lines={"type": "integer", "minimum": 1, "description": "how many lines (default: to the end)"}),
    frozenset({LIBRARIAN_ANSWERER, LIBRARIAN_BUILDER}), fs_read,
)

READER_TOOLS: tuple[Tool, ...] = (SEARCH, READ_ID, LIST, READ_LINES, ANSWER)
