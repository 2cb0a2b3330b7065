"""The JAM researcher's tools (paper 002): open, search, browse, finalize.

- `open(path)`: the folder's README and listing (the workspace `open` view);
- `search(query, page)`: hybrid (BM25 + dense, RRF) search, five hits a page
  (the same observation format as the KBGym reader's search);
- `browse(path, query)`: the lines of one file that share terms with the
  query (all lines when it has no more than `BROWSE_ALL_LINES`), with the
  file's provenance so a memo leads to its raw session;
- `finalize(context, sources, sufficient)`: ends the episode with the
  built context; each source (a path or id) is resolved and a synthetic
  file is traced back through its provenance to the raw sessions, which
  are what `finalized_sources` reports (source recall counts those).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from librarian.roles.reader_tools import kbgym_search, one_line
from librarian.roles.tools import (
    ANY_STRING,
    STRING,
    Tool,
    ToolContext,
    ToolInputError,
    ToolResult,
    from_view,
    params,
)
from librarian.roles.tools import touched as touched_result
from librarian.search.analysis import analyze
from librarian.workspace import views
from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Node, NodeSource

JAM_RESEARCHER = "jam_researcher"
BROWSE_ALL_LINES = 3
BROWSE_MAX_LINES = 12
MAX_SEARCH_PAGE = 100  # 500 hits: far past any useful page, and a number the grammar keeps to three digits


def _open(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return from_view(views.open(ctx.workspace, a.get("path", "")))


def _search(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    return kbgym_search(ctx, a)


def relevant_lines(text: str, query: str, max_lines: int = BROWSE_MAX_LINES) -> list[tuple[int, str]]:
    """(line number, line) of the lines sharing the most analysed terms with the query, in file order."""
    lines = text.splitlines()
    if len(lines) <= BROWSE_ALL_LINES:
        return [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip()]
    want = set(analyze(query))
    scored = [(len(want & set(analyze(ln))), i) for i, ln in enumerate(lines, start=1)]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:max_lines]
    return [(i, lines[i - 1]) for _, i in sorted(best, key=lambda s: s[1])]


def _browse(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    node = views.resolve(ctx.workspace, a["path"])
    if node.kind == "directory":
        raise ToolInputError(f"{node.path!r} is a folder; use open({node.path!r}) to see its README and entries")
    found = relevant_lines(node.text, a["query"])
    total = len(node.text.splitlines())
    out = [f'browse {node.path} for "{one_line(a["query"], 200)}": {len(found)} of {total} lines  id={node.id}']
    if node.provenance:
        out.append("provenance: " + ", ".join(_paths(ctx.workspace, node.provenance)))
    out += [f"{i}: {ln}" for i, ln in found] or ["(no line shares a word with the query)"]
    return touched_result("\n".join(out), [node])


def _paths(src: NodeSource, ids: tuple[str, ...]) -> list[str]:
    return [n.path if (n := src.get(i)) is not None else i for i in ids]


def trace_sources(src: NodeSource, refs: list[str]) -> tuple[list[str], list[str]]:
    """(raw source ids, refs that resolve to nothing): synthetic files are followed through their provenance."""
    raw: list[str] = []
    unknown: list[str] = []
    for ref in refs:
        try:
            node = views.resolve(src, ref)
        except WorkspaceError:
            unknown.append(ref)
            continue
        stack: list[Node] = [node]
        seen: set[str] = set()
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if n.kind == "raw":
                raw.append(n.id)
            stack += [p for p in (src.get(i) for i in n.provenance) if p is not None]
    return list(dict.fromkeys(raw)), unknown


@dataclass(frozen=True, slots=True)
class Finalized:
    """A researcher's final context: the text, the raw sources it rests on, and whether it judged them sufficient."""

    context: str
    sources: tuple[str, ...]
    sufficient: bool = True
    cited: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps({"context": self.context, "sources": list(self.sources), "sufficient": self.sufficient,
                           "cited": list(self.cited)}, ensure_ascii=False)


def finalized(answer: str | None) -> Finalized:
    """A trajectory's answer as a `Finalized` (plain text from a forced turn: no sources, not sufficient)."""
    if not answer:
        return Finalized("", (), False)
    try:
        data = json.loads(answer)
        return Finalized(data["context"], tuple(data["sources"]), bool(data["sufficient"]), tuple(data["cited"]))
    except (json.JSONDecodeError, KeyError, TypeError):
        return Finalized(answer, (), False)


def _finalize(ctx: ToolContext, a: dict[str, Any]) -> ToolResult:
    cited = [str(s) for s in a.get("sources", [])]
    raw, unknown = trace_sources(ctx.workspace, cited)
    result = Finalized(str(a.get("context", "")), tuple(raw), bool(a.get("sufficient", True)), tuple(cited))
    note = f"; not found: {', '.join(unknown)}" if unknown else ""
    return ToolResult(f"finalized with {len(raw)} raw source(s): {', '.join(raw) or 'none'}{note}",
                      terminal=True, answer=result.to_json())


_R = frozenset({JAM_RESEARCHER})
OPEN = Tool("jam.open", "open", "Open a folder: its README (a summary of what is inside) and its entries.",
            params([], path={**ANY_STRING, "description": "folder path, '' for the top"}), _R, _open)
SEARCH = Tool(
    "jam.search", "search",
    "Hybrid search (keywords + meaning) over every file and session; five hits per page, one action per page.",
    params(["query"], query={**STRING, "description": "what to look for"},
           page={"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_PAGE,
                 "description": "result page, from 1 (default 1)"}),
    _R, _search)
BROWSE = Tool(
    "jam.browse", "browse",
    "Read one file or session and get only its lines relevant to a query, with the sources it came from.",
    params(["path", "query"], path={**STRING, "description": "file path or id"},
           query={**STRING, "description": "what you are looking for in it"}),
    _R, _browse)
FINALIZE = Tool(
    "jam.finalize", "finalize",
    "Finish: give the context the client needs (the relevant facts) and the sources they come from.",
    params(["context", "sources"], context={**ANY_STRING, "description": "the relevant information found"},
           sources={"type": "array", "items": STRING, "description": "paths or ids of the supporting files"},
           sufficient={"type": "boolean", "description": "whether the evidence answers the request (default true)"}),
    _R, _finalize, terminal=True)

RESEARCHER_TOOLS: tuple[Tool, ...] = (OPEN, SEARCH, BROWSE, FINALIZE)
