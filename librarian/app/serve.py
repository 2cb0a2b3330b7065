"""`librarian serve WORKSPACE`: serve a built workspace to other agents.

`--mcp-stdio` (default): an MCP server on stdin/stdout; `--mcp-http`: MCP
over streamable HTTP at http://HOST:PORT/mcp; `--api`: the HTTP API with an
OpenAPI schema at /openapi.json and docs at /docs (tools plus POST /ask).
Read-only unless `--write` (then an `apply` tool edits the workspace and the
snapshot is saved after each op). Paths never leave the workspace.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from librarian.app.corpus import InputError
from librarian.app.service import ServiceError, WorkspaceService
from librarian.app.workspace_dir import open_workspace
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError


def make_asker(service: WorkspaceService, reader: str, backend: str | None, backend_args: dict) -> Any:
    """`question -> record` for POST /ask (answers are serialised with the other tools)."""
    from librarian.app import ask

    cfg = ask.AskConfig(reader=reader, backend=backend, backend_args=backend_args)
    ask.make_role(reader, None)
    model = ask.make_reader_backend(cfg)

    def asker(question: str) -> dict:
        from librarian.app.corpus import AskItem

        with service._lock:
            try:
                rec = ask.answer(service.opened, [AskItem("q", question)], cfg, backend=model)[0]
            except InputError as exc:
                raise ServiceError(str(exc)) from None
        return rec

    return asker


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="librarian serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workspace", help="a folder written by `librarian build`, or a snapshot .parquet")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--mcp-stdio", action="store_true", help="MCP over stdin/stdout (default)")
    mode.add_argument("--mcp-http", action="store_true", help="MCP over streamable HTTP at /mcp")
    mode.add_argument("--api", action="store_true", help="the HTTP API (OpenAPI) with ask")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--write", action="store_true", help="enable the apply tool (edits are saved)")
    p.add_argument("--embedder", default="none", help="query embedder for search (none: BM25, no model load)")
    p.add_argument("--reader", default="kbgym", help="POST /ask: reader role (kbgym, librarian)")
    p.add_argument("--backend", help="POST /ask: policy backend (default per reader)")
    return p


def main(argv: Sequence[str]) -> int:
    """CLI entry."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    args = parser().parse_args(list(argv))
    try:
        opened = open_workspace(args.workspace, writable=args.write, embedder=args.embedder)
        service = WorkspaceService(opened, write=args.write)
    except (WorkspaceError, SnapshotFormatError, ServiceError) as exc:
        print(f"librarian serve: {exc}", file=sys.stderr)
        return 2
    if args.api or args.mcp_http:
        import uvicorn

        if args.api:
            from librarian.app.serve_http import make_app

            can_ask = opened.index is not None or args.reader == "librarian"
            asker = make_asker(service, args.reader, args.backend, {}) if can_ask else None
            app = make_app(service, asker)
        else:
            from librarian.app.serve_mcp import http_app

            app = http_app(service, args.host)
        print(f"librarian serve: {'API' if args.api else 'MCP'} on http://{args.host}:{args.port}"
              f"{'/mcp' if args.mcp_http else '/docs'} ({'read-write' if args.write else 'read-only'})",
              file=sys.stderr, flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
        return 0
    import anyio

    from librarian.app.serve_mcp import run_stdio

    anyio.run(run_stdio, service)
    return 0
