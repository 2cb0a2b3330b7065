"""The workspace tools that `serve` exposes, one implementation for MCP and HTTP.

Read-only tools: `ls`, `read`, `open`, `search` (the agent views, so paths
are normalised by the workspace's own rules: `..`, absolute paths and control
characters are refused, and nothing ever touches the file system). The HTTP
API adds `ask`. With `write=True` an `apply` tool applies one workspace op
(the curator's and builder's ops) to a live workspace, keeps the index in
step and saves the snapshot and the served trace after each op.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from librarian.app.workspace_dir import OpenedWorkspace
from librarian.search.errors import SearchError
from librarian.search.paging import search_page
from librarian.search.sync import IndexSync
from librarian.workspace import codec, views, write_trace
from librarian.workspace.errors import WorkspaceError
from librarian.workspace.provenance import provenance_paths
from librarian.workspace.text import terminal_safe

SERVE_TRACE = "serve_trace.parquet"
PATH = {"type": "string", "description": "a workspace path ('' is the top); never leaves the workspace"}
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "ls": {"description": "List the files and folders directly under a folder ('' is the top).",
           "schema": {"type": "object", "properties": {"path": PATH}, "additionalProperties": False}},
    "read": {"description": "Read a file by path or id (optionally a line range): its text, links and provenance, "
                            "and the provenance paths back to raw documents.",
             "schema": {"type": "object", "properties": {
                 "path": {**PATH, "minLength": 1, "description": "file path or id"},
                 "start_line": {"type": "integer", "minimum": 1, "description": "first line (default 1)"},
                 "num_lines": {"type": "integer", "minimum": 1, "description": "how many lines (default: all)"}},
                 "required": ["path"], "additionalProperties": False}},
    "open": {"description": "A folder's README followed by its listing.",
             "schema": {"type": "object", "properties": {"path": PATH}, "additionalProperties": False}},
    "search": {"description": "Search the workspace: five hits per page, each with id, kind, path and text.",
               "schema": {"type": "object", "properties": {
                   "query": {"type": "string", "minLength": 1, "description": "what to look for"},
                   "page": {"type": "integer", "minimum": 1, "description": "result page, from 1 (default 1)"}},
                   "required": ["query"], "additionalProperties": False}},
}
APPLY_SCHEMA = {
    "description": "Apply one workspace op (write mode only), e.g. {\"op\": \"add\", \"text\": \"...\", \"path\": "
                   "\"notes/x\"}; ops: add, edit, delete, link, link_many, unlink, move, make_dir, create_file, "
                   "merge_files.",
    "schema": {"type": "object", "properties": {"op": {"type": "object", "description": "the op payload"}},
               "required": ["op"], "additionalProperties": False},
}


class ServiceError(ValueError):
    """A request the workspace refused (a bad op, write in read-only mode); safe to show. HTTP 400."""

    status = 400


class SaveError(ServiceError):
    """An op was valid but the workspace could not be saved; it was taken back. HTTP 500."""

    status = 500


class NotFound(ServiceError):
    """Nothing in the workspace answers to this path, id or line range (a path outside it never does). HTTP 404."""

    status = 404


@dataclass
class WorkspaceService:
    """Tools over one opened workspace. Thread-safe: calls are serialised."""

    opened: OpenedWorkspace
    write: bool = False
    search_mode: str = "bm25"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _sync: Any = None
    version: int = 0  # the version served (online curation swaps versions; see `swap`)

    def __post_init__(self) -> None:
        self._state = (self.opened, self._lock, self.version)  # read once per call: a swap never splits it
        if self.write and not self.opened.writable:
            raise ServiceError("write mode needs the workspace opened writable (open_workspace(..., writable=True))")
        if self.write and self.opened.index is not None:
            self._sync = IndexSync(self.opened.index, self.opened.source, 0)

    @property
    def src(self) -> Any:
        return self._state[0].source

    def swap(self, opened: OpenedWorkspace, version: int, lock: threading.Lock) -> None:
        """Serve another version (read-only services): calls in flight finish on the one they started with."""
        if self.write:
            raise ServiceError("a workspace served with --write cannot swap versions")
        self._state = (opened, lock, version)
        self.opened, self._lock, self.version = opened, lock, version

    def tool_names(self) -> list[str]:
        return [*TOOL_SCHEMAS, *(["apply"] if self.write else [])]

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run a tool by name; raises `ServiceError` with a readable message on any bad request."""
        handlers = {"ls": self.ls, "read": self.read, "open": self.open, "search": self.search, "apply": self.apply}
        if name not in handlers or (name == "apply" and not self.write):
            raise ServiceError(f"unknown tool {name!r}; available: {', '.join(self.tool_names())}")
        try:
            return handlers[name](**args)
        except TypeError as exc:
            raise ServiceError(f"{name}: bad arguments ({exc})") from None

    def _view(self, fn: Any, *a: Any, state: tuple | None = None) -> dict[str, Any]:
        opened, lock, _ = state or self._state
        with lock:
            try:
                result = fn(opened.source, *a)
            except WorkspaceError as exc:
                raise NotFound(str(exc)) from None
        return {"text": result.text, "nodes": list(result.cost.nodes_touched), "est_tokens": result.cost.est_tokens}

    def ls(self, path: str = "") -> dict[str, Any]:
        return self._view(views.ls, path)

    def open(self, path: str = "") -> dict[str, Any]:
        return self._view(views.open, path)

    def read(self, path: str, start_line: int = 1, num_lines: int | None = None) -> dict[str, Any]:
        state = self._state
        out = self._view(views.read, path, start_line, num_lines, state=state)
        opened, lock, _ = state
        with lock:
            node = views.resolve(opened.source, path)
            out["provenance_paths"] = provenance_paths(opened.source, node.id, max_paths=3)
        return out

    def search(self, query: str, page: int = 1) -> dict[str, Any]:
        opened, lock, _ = self._state
        if opened.index is None:
            raise ServiceError("search is not available: this workspace has no saved search index")
        with lock:
            try:
                result = search_page(opened.index, query, page, mode=self.search_mode)  # type: ignore[arg-type]
            except SearchError as exc:
                raise ServiceError(str(exc)) from None
        hits = [{"id": h.id, "path": h.path, "kind": h.kind, "text": h.text} for h in result.hits]
        lines = [f'search "{terminal_safe(query)}" page {result.number}: {len(hits)} hits' +
                 (f" (more on page {result.number + 1})" if result.has_more else " (no more pages)")]
        lines += [f"{i}. id={h['id']}  [{h['kind']}] {h['path']}\n   {terminal_safe(h['text'][:300])}"
                  for i, h in enumerate(hits, 1)]
        return {"text": "\n".join(lines), "hits": hits, "page": result.number, "has_more": result.has_more}

    def apply(self, op: dict[str, Any]) -> dict[str, Any]:
        if not self.write:
            raise ServiceError("this workspace is served read-only; start `librarian serve` with --write to edit")

        with self._lock:
            ws = self.src
            try:
                result = ws.apply_payload(op)
            except WorkspaceError as exc:
                raise ServiceError(str(exc)) from None
            trace_path = self.opened.snapshot_path.parent / SERVE_TRACE
            try:  # an op is kept only once it is saved: memory and disk never disagree
                write_trace(ws.trace, trace_path)
                codec.write_parquet(*ws.state(), self.opened.snapshot_path)
            except Exception as exc:  # noqa: BLE001 - whatever the failure, the op must be taken back
                ws.revert_last()
                try:
                    write_trace(ws.trace, trace_path)
                except Exception:  # noqa: BLE001, S110 - best effort; the snapshot (what is reopened) is untouched
                    pass
                raise SaveError(f"the op was not applied: the workspace could not be saved ({exc})") from None
            if self._sync is not None:
                self._sync.sync(embed=False)
        return {"text": result.message, "created": list(result.created), "changed": list(result.changed),
                "deleted": list(result.deleted), "step": result.step}
