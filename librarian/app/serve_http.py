"""The HTTP API (FastAPI, OpenAPI schema at /openapi.json): the workspace tools plus `ask`.

GET /ls, /read, /open, /search take query parameters; POST /ask answers a
question with the configured reader (naming the version it answered on);
POST /apply edits (write mode only: otherwise 403); POST /feedback takes a
gold answer or a verdict on an answer (`serve --curate` only: otherwise 403). A refused request (a path outside the workspace, an unknown
file, a bad page) answers 400 with `{"detail": message}`.

Every request first passes an `HttpGuard` (see SECURITY.md): the Host header
must be on the allow-list (421; loopback names only when the server is bound
to loopback, as MCP does), the bearer token must match when one is set (401),
and a body larger than the limit is refused before it is parsed (413).
Error messages echo at most `MAX_ECHO_CHARS` characters of the input.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Body, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from librarian.app.service import APPLY_SCHEMA, TOOL_SCHEMAS, ServiceError, WorkspaceService

ENV_TOKEN = "LIBRARIAN_SERVE_TOKEN"
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024  # an op's text is at most 100,000 characters
MAX_ECHO_CHARS = 200
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback(host: str) -> bool:
    """True for 'localhost' and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host of a Host header, without port or IPv6 brackets, lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    name, sep, port = header.rpartition(":")
    return name if sep and port.isdigit() else header


@dataclass(frozen=True)
class HttpGuard:
    """What every HTTP request must pass before the app sees it.

    `allowed_hosts` None accepts any Host header; `token` None needs no
    Authorization header; bodies over `max_body_bytes` answer 413 unread.
    """

    allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES
    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def for_bind(cls, host: str, token: str | None = None, extra_hosts: Iterable[str] = (),
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> HttpGuard:
        """The guard for a server bound to `host`: loopback names only when `host` is loopback (as MCP
        does); any Host otherwise, unless `extra_hosts` names the ones to accept."""
        extra = {host_name(h) for h in extra_hosts if h.strip()}
        if max_body_bytes < 1:
            raise ValueError(f"the body limit must be at least 1 byte, got {max_body_bytes}")
        if is_loopback(host):
            allowed: frozenset[str] | None = LOOPBACK_NAMES | extra
        else:
            allowed = (LOOPBACK_NAMES | {host_name(host)} | extra) if extra else None
        return cls(allowed, token or None, max_body_bytes)


class GuardMiddleware:
    """ASGI middleware enforcing an `HttpGuard`: Host (421), Origin (403), token (401), body size (413)."""

    def __init__(self, app: Any, guard: HttpGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self._refusal(headers)
        if refusal is not None:
            await _send_json(send, *refusal)
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.guard.max_body_bytes:
            await _send_json(send, *self._too_large())
            return
        messages, size = [], 0
        while True:  # read the body up to the limit before the app parses any of it
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.guard.max_body_bytes:
                await _send_json(send, *self._too_large())
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Any:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    def _too_large(self) -> tuple[int, str, dict[str, str]]:
        return 413, f"the request body is larger than {self.guard.max_body_bytes} bytes", {}

    def _refusal(self, headers: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
        allowed = self.guard.allowed_hosts
        if allowed is not None:
            if host_name(headers.get("host", "")) not in allowed:
                return 421, "this Host header is not served here (allowed: " + ", ".join(sorted(allowed)) + ")", {}
            origin = headers.get("origin")
            if origin and (urlsplit(origin).hostname or "") not in allowed:
                return 403, "requests from this Origin are refused", {}
        if self.guard.token is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.guard.token.encode()):
                return 401, "a valid bearer token is required (Authorization: Bearer TOKEN)", {
                    "www-authenticate": "Bearer"}
        return None


async def _send_json(send: Any, status: int, detail: str, extra: dict[str, str]) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((k.encode(), v.encode()) for k, v in extra.items())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def guarded(app: Any, guard: HttpGuard) -> Any:
    """`app` (FastAPI or Starlette) with `guard` in front of every request."""
    app.add_middleware(GuardMiddleware, guard=guard)
    return app


def token_from_env(explicit: str | None = None) -> str | None:
    """The bearer token: `explicit` if given, else `LIBRARIAN_SERVE_TOKEN`, else None."""
    return explicit or os.environ.get(ENV_TOKEN) or None


def short(value: Any, limit: int = MAX_ECHO_CHARS) -> Any:
    """`value` as an error may echo it: kept when its JSON is short, else a cut-down string."""
    text = value if isinstance(value, str) else json.dumps(jsonable_encoder(value), default=str)
    if len(text) <= limit:
        return value
    return f"{text[:limit]}... ({len(text)} characters in all)"


class SafeJSONResponse(JSONResponse):
    """JSON that is always valid UTF-8: text that cannot be encoded is sent with ASCII escapes."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class Error(BaseModel):
    detail: str


class ViewOut(BaseModel):
    text: str
    nodes: list[str]
    est_tokens: int


class ReadOut(ViewOut):
    provenance_paths: list[list[str]]


class HitOut(BaseModel):
    id: str
    path: str
    kind: str
    text: str


class SearchOut(BaseModel):
    text: str
    hits: list[HitOut]
    page: int
    has_more: bool


class AskIn(BaseModel):
    question: str = Field(min_length=1, max_length=2000, pattern=r"\S")


class AskOut(BaseModel):
    question: str
    answer: str | None
    end: str
    files_read: list[str]
    provenance: dict[str, list[list[str]]]
    actions: int
    est_tokens_read: int
    version: int | None = None  # the workspace version the answer was computed on
    snapshot_hash: str | None = None  # that version's content hash
    request_id: str | None = None  # with --curate: the id to send feedback on


class FeedbackIn(BaseModel):
    request_id: str = Field(min_length=1, max_length=200)
    gold: list[Annotated[str, Field(max_length=2000)]] | None = Field(None, max_length=100)
    correct: bool | None = None


class FeedbackOut(BaseModel):
    feedback_id: str
    request_id: str


class ApplyOut(BaseModel):
    text: str
    created: list[str]
    changed: list[str]
    deleted: list[str]
    step: int


class ToolOut(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Error, "description": "the workspace refused the request"},
    401: {"model": Error, "description": "the server has a bearer token and the request did not carry it"},
    404: {"model": Error, "description": "no such file, folder or line range in the workspace (paths never leave it)"},
    413: {"model": Error, "description": "the request body is over the server's limit (refused unread)"},
    421: {"model": Error, "description": "the Host header is not one this server answers to"},
}
MAX_INT = 2**31 - 1


def make_app(service: WorkspaceService, asker: Any = None, guard: HttpGuard | None = None,
             feedback: Any = None) -> FastAPI:
    """The API over `service`; `asker(question) -> ask record` serves POST /ask (503 when None);
    `feedback(request_id, gold, correct) -> {feedback_id, request_id}` serves POST /feedback (403 when None:
    the server is not curating).

    `guard` defaults to `HttpGuard()`: loopback Host names only, no token, the default body limit.
    """
    app = FastAPI(title="librarian workspace", version="1", default_response_class=SafeJSONResponse,
                  description="Browse, read and search a librarian workspace; ask questions over it.")

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for error in exc.errors()[:20]:
            error = dict(error)
            if "input" in error:
                error["input"] = short(error["input"])
            errors.append(jsonable_encoder(error))
        return SafeJSONResponse(status_code=422, content={"detail": errors})

    def run(name: str, **args: Any) -> dict[str, Any]:
        try:
            return service.call(name, {k: v for k, v in args.items() if v is not None})
        except ServiceError as exc:
            raise HTTPException(status_code=exc.status, detail=short(str(exc), 1000)) from None

    @app.get("/tools", response_model=list[ToolOut])
    def tools() -> list[dict[str, Any]]:
        """The tools with their JSON schemas (as MCP lists them)."""
        specs = {**TOOL_SCHEMAS, **({"apply": APPLY_SCHEMA} if service.write else {})}
        return [{"name": n, "description": s["description"], "input_schema": s["schema"]} for n, s in specs.items()]

    @app.get("/ls", response_model=ViewOut, responses=ERRORS)
    def ls(path: str = Query("", max_length=1000)) -> dict[str, Any]:
        """List a folder ('' is the top)."""
        return run("ls", path=path)

    @app.get("/open", response_model=ViewOut, responses=ERRORS)
    def open_(path: str = Query("", max_length=1000)) -> dict[str, Any]:
        """A folder's README and listing."""
        return run("open", path=path)

    @app.get("/read", response_model=ReadOut, responses=ERRORS)
    def read(path: str = Query(..., min_length=1, max_length=1000),
             start_line: int = Query(1, ge=1, le=MAX_INT),
             num_lines: int | None = Query(None, ge=1, le=MAX_INT)) -> dict[str, Any]:
        """A file's text (a line range of it), links, provenance and provenance paths."""
        return run("read", path=path, start_line=start_line, num_lines=num_lines)

    @app.get("/search", response_model=SearchOut, responses=ERRORS)
    def search(query: str = Query(..., min_length=1, max_length=1000, pattern=r"\w"), page: int = Query(1, ge=1, le=1000)) -> dict:
        """Five hits per page."""
        return run("search", query=query, page=page)

    @app.post("/ask", response_model=AskOut, responses={**ERRORS, 503: {"model": Error}})
    def ask(body: AskIn) -> dict[str, Any]:
        """Answer a question with the served reader."""
        if asker is None:
            raise HTTPException(status_code=503, detail="no reader is configured for this server")
        try:
            return asker(body.question)
        except ServiceError as exc:
            raise HTTPException(status_code=exc.status, detail=short(str(exc), 1000)) from None

    @app.post("/feedback", response_model=FeedbackOut, responses={**ERRORS, 403: {"model": Error}})
    def feedback_(body: FeedbackIn) -> dict[str, Any]:
        """Feedback on an answer (`serve --curate`): its `request_id` and a gold answer or `correct`."""
        if feedback is None:
            raise HTTPException(status_code=403, detail="this server is not curating; restart with --curate")
        try:
            return feedback(body.request_id, body.gold, body.correct)
        except ServiceError as exc:
            raise HTTPException(status_code=exc.status, detail=short(str(exc), 1000)) from None

    @app.post("/apply", response_model=ApplyOut, responses={**ERRORS, 403: {"model": Error}})
    def apply(op: dict[str, Any] = Body(..., embed=True)) -> dict[str, Any]:
        """Apply one workspace op (write mode only)."""
        if not service.write:
            raise HTTPException(status_code=403, detail="this workspace is served read-only; restart with --write")
        return run("apply", op=op)

    return guarded(app, guard if guard is not None else HttpGuard())
