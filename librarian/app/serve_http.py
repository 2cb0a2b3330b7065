"""The HTTP API (FastAPI, OpenAPI schema at /openapi.json): the workspace tools plus `ask`.

GET /ls, /read, /open, /search take query parameters; POST /ask answers a
question with the configured reader; POST /apply edits (write mode only:
otherwise 403). A refused request (a path outside the workspace, an unknown
file, a bad page) answers 400 with `{"detail": message}`.
"""

from __future__ import annotations

from typing import Any

from fastapi import Body, FastAPI, HTTPException, Query
from pydantic import BaseModel, Field

from librarian.app.service import APPLY_SCHEMA, TOOL_SCHEMAS, ServiceError, WorkspaceService


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
    404: {"model": Error, "description": "no such file, folder or line range in the workspace (paths never leave it)"},
}
MAX_INT = 2**31 - 1


def make_app(service: WorkspaceService, asker: Any = None) -> FastAPI:
    """The API over `service`; `asker(question) -> ask record` serves POST /ask (503 when None)."""
    app = FastAPI(title="librarian workspace", version="1",
                  description="Browse, read and search a librarian workspace; ask questions over it.")

    def run(name: str, **args: Any) -> dict[str, Any]:
        try:
            return service.call(name, {k: v for k, v in args.items() if v is not None})
        except ServiceError as exc:
            raise HTTPException(status_code=exc.status, detail=str(exc)) from None

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
            raise HTTPException(status_code=exc.status, detail=str(exc)) from None

    @app.post("/apply", response_model=ApplyOut, responses={**ERRORS, 403: {"model": Error}})
    def apply(op: dict[str, Any] = Body(..., embed=True)) -> dict[str, Any]:
        """Apply one workspace op (write mode only)."""
        if not service.write:
            raise HTTPException(status_code=403, detail="this workspace is served read-only; restart with --write")
        return run("apply", op=op)

    return app
