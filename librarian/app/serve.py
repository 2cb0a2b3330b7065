"""`librarian serve WORKSPACE`: serve a built workspace to other agents.

`--mcp-stdio` (default): an MCP server on stdin/stdout; `--mcp-http`: MCP
over streamable HTTP at http://HOST:PORT/mcp; `--api`: the HTTP API with an
OpenAPI schema at /openapi.json and docs at /docs (tools plus POST /ask).
Read-only unless `--write` (then an `apply` tool edits the workspace and the
snapshot is saved after each op; an op that cannot be saved is taken back).
Paths never leave the workspace.

Over HTTP: bound to 127.0.0.1 by default, answering only loopback Host names;
`--token` (or LIBRARIAN_SERVE_TOKEN) requires `Authorization: Bearer TOKEN`
on every request, and `--write` on a non-loopback address refuses to start
without one; request bodies over `--max-body-bytes` are refused unread.
See SECURITY.md.

`--curate` (a build folder, read-only): every answer is tagged with the
version it was computed on and logged (WORKSPACE/online/traffic, Parquet)
before it is returned; POST /feedback (and the MCP `feedback` tool) takes a
gold answer or correct/incorrect; a background thread curates a copy and
swaps in each new version that passes the check on held-back questions.
`librarian rollback WORKSPACE VERSION` serves an earlier one. docs/online.md.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import uvicorn

from librarian.answering.answer import answer
from librarian.answering.backends import make_reader_backend
from librarian.answering.config import AskConfig, AskItem
from librarian.answering.readers import make_role
from librarian.app.build import backend_args
from librarian.app.corpus import InputError
from librarian.app.online_serve import CurateOptions, OnlineServer
from librarian.app.serve_http import ENV_TOKEN, HttpGuard, guarded, is_loopback, make_app, token_from_env
from librarian.app.serve_mcp import http_app, run_stdio
from librarian.app.service import ServiceError, WorkspaceService
from librarian.app.workspace_dir import open_workspace
from librarian.config import ConfigError
from librarian.datasets.records import METRICS
from librarian.online.curation import CurationConfig
from librarian.online.policy import PolicyConfig
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError


def make_asker(service: WorkspaceService, reader: str, backend: str | None, options: dict) -> Any:
    """`question -> record` for POST /ask (answers are serialised with the other tools)."""
    cfg = AskConfig(reader=reader, backend=backend, backend_args=options)
    make_role(reader, None)
    model = make_reader_backend(cfg)

    def asker(question: str) -> dict:
        with service._lock:
            opened = service.opened
            try:
                rec = answer(opened, [AskItem("q", question)], cfg, backend=model)[0]
            except InputError as exc:
                raise ServiceError(str(exc)) from None
        rec["version"] = opened.version
        return rec

    return asker


def http_guard(args: argparse.Namespace) -> Any:
    """The `HttpGuard` for the HTTP modes; refuses `--write` on a non-loopback address without a token."""
    token = token_from_env(args.token)
    if args.write and not is_loopback(args.host) and token is None:
        raise InputError(f"--write on {args.host} (not a loopback address) needs a bearer token: set {ENV_TOKEN} "
                         "(or pass --token), or serve read-only, or bind to 127.0.0.1")
    if getattr(args, "curate", False) and not is_loopback(args.host) and token is None:
        raise InputError(f"--curate on {args.host} (not a loopback address) needs a bearer token: feedback changes "
                         f"the workspace; set {ENV_TOKEN} (or pass --token), or bind to 127.0.0.1")
    if args.max_body_bytes < 1:
        raise InputError(f"--max-body-bytes must be at least 1, got {args.max_body_bytes}")
    return HttpGuard.for_bind(args.host, token, args.allowed_host, args.max_body_bytes)


def bind(host: str, port: int) -> Any:
    """A listening TCP socket on host:port (port 0: a free one, read back with `getsockname`)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


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
    p.add_argument("--token", help="HTTP: require `Authorization: Bearer TOKEN` (default: $LIBRARIAN_SERVE_TOKEN; "
                                   "prefer the variable: a command line is visible to other users)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="HTTP: also answer this Host name (repeatable; on a non-loopback address, only these)")
    p.add_argument("--max-body-bytes", type=int, default=2 * 1024 * 1024,
                   help="HTTP: refuse request bodies larger than this, unread (413; default 2 MiB)")
    p.add_argument("--embedder", default="none", help="query embedder for search (none: BM25, no model load)")
    p.add_argument("--reader", default="kbgym", help="POST /ask: reader role (kbgym, librarian)")
    p.add_argument("--backend", help="POST /ask: policy backend (default per reader)")
    c = p.add_argument_group("online curation (--curate; docs/online.md)")
    c.add_argument("--curate", action="store_true",
                   help="log every question and feedback (Parquet in WORKSPACE/online/) and curate a copy in the "
                        "background, swapping in each new version that passes the check")
    c.add_argument("--curate-every", type=float, default=30.0, metavar="SECONDS", help="a round at most this often")
    c.add_argument("--curate-min", type=int, default=1, metavar="N", help="questions ready for a round to run")
    c.add_argument("--curate-max", type=int, default=50, metavar="N",
                   help="distinct questions a round curates at most (the oldest first; the rest wait)")
    c.add_argument("--curator", default="kbgym_curator", choices=["kbgym_curator", "librarian_builder"])
    c.add_argument("--curator-backend", default="scripted", help="the curator's policy backend (default scripted)")
    c.add_argument("--curator-arg", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--curator-budget", type=int, default=30, help="the curator's actions per question")
    c.add_argument("--holdback", type=float, default=0.2, help="share of questions held back for the check")
    c.add_argument("--check-questions", type=int, default=20, help="held-back questions re-asked on a candidate")
    c.add_argument("--check-min", type=int, default=5, help="fewer held back: rounds wait")
    c.add_argument("--f1-tolerance", type=float, default=0.03, help="refuse a candidate losing more F1 than this")
    c.add_argument("--action-tolerance", type=float, default=0.0,
                   help="refuse a candidate costing more than (1 + this) x the served version's actions")
    c.add_argument("--feedback-wait", type=float, default=300.0, metavar="SECONDS",
                   help="with --judge: questions without feedback this long are judged")
    c.add_argument("--judge", metavar="BACKEND", help="judge answers nobody gave feedback on (hf, openai, ...)")
    c.add_argument("--judge-arg", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--metric", default="set_f1", help="how an answer is graded against a gold from feedback")
    return p


def curate_options(args: argparse.Namespace) -> Any:
    """The `CurateOptions` the --curate flags give (bad values raise `InputError`)."""
    if args.write:
        raise InputError("--curate and --write exclude each other: curation writes new versions, never the served one")
    if not Path(args.workspace).is_dir():
        raise InputError(f"--curate needs a build folder (it keeps its versions and logs inside), not {args.workspace}")
    if args.metric not in METRICS:
        raise InputError(f"--metric must be one of {', '.join(METRICS)}, got {args.metric!r}")
    if args.curate_every <= 0 or args.curate_min < 1 or args.curate_max < 1 or args.feedback_wait < 0:
        raise InputError("--curate-every must be > 0, --curate-min and --curate-max >= 1, --feedback-wait >= 0")
    curator = PolicyConfig(args.curator_backend, backend_args(args.curator_arg))
    curation = CurationConfig(role=args.curator, curator=curator,
                              backward_budget=args.curator_budget, holdback=args.holdback,
                              check_questions=args.check_questions, check_min_questions=args.check_min,
                              f1_tolerance=args.f1_tolerance, action_tolerance=args.action_tolerance)
    try:
        curation.check()
    except ConfigError as exc:
        raise InputError(str(exc).replace("curation.", "--")) from None
    return CurateOptions(curation, args.curate_every, args.curate_min, args.curate_max, args.feedback_wait,
                         args.judge, backend_args(args.judge_arg), args.metric)


def start_curating(args: argparse.Namespace, service: WorkspaceService, opened: Any) -> Any:
    """The `OnlineServer` of `--curate`, its thread started."""
    if opened.index is None:
        raise InputError(f"{args.workspace} has no saved search index; --curate needs one (rebuild with librarian build)")
    server = OnlineServer(args.workspace, service, AskConfig(reader=args.reader, backend=args.backend),
                          curate_options(args), embedder=getattr(opened.index, "embedder", None))
    server.start()
    return server


def main(argv: Sequence[str]) -> int:
    """CLI entry."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    args = parser().parse_args(list(argv))
    http = args.api or args.mcp_http
    online = None
    try:
        guard = http_guard(args) if http else None
        if args.curate:
            curate_options(args)  # refuse bad flags before anything is loaded
        opened = open_workspace(args.workspace, writable=args.write, embedder=args.embedder)
        service = WorkspaceService(opened, write=args.write, version=opened.version)
        if args.curate:
            online = start_curating(args, service, opened)
    except (WorkspaceError, SnapshotFormatError, ServiceError, InputError) as exc:
        print(f"librarian serve: {exc}", file=sys.stderr)
        return 2
    try:
        return _serve(args, http, guard, service, opened, online)
    finally:
        if online is not None:
            online.stop()


def _serve(args: argparse.Namespace, http: bool, guard: Any, service: WorkspaceService, opened: Any,
           online: Any) -> int:
    extra = online.mcp_tools() if online is not None else None
    if http:
        if args.api:
            can_ask = opened.index is not None or args.reader == "librarian"
            if online is not None:
                app = make_app(service, online.ask, guard, online.feedback)
            else:
                app = make_app(service, make_asker(service, args.reader, args.backend, {}) if can_ask else None, guard)
        else:
            app = guarded(http_app(service, args.host, extra), guard)
        try:
            sock = bind(args.host, args.port)  # bound here, so that --port 0 can say which port it got
        except OSError as exc:
            print(f"librarian serve: cannot listen on {args.host}:{args.port} ({exc.strerror or exc})",
                  file=sys.stderr)
            return 2
        port = sock.getsockname()[1]
        print(f"librarian serve: {'API' if args.api else 'MCP'} on http://{args.host}:{port}"
              f"{'/mcp' if args.mcp_http else '/docs'} ({'read-write' if args.write else 'read-only'}"
              f"{', bearer token required' if guard.token else ''}"
              f"{f', curating from version {service.version}' if online is not None else ''})",
              file=sys.stderr, flush=True)
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
        return 0

    anyio.run(run_stdio, service, extra)
    return 0
