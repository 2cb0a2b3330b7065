"""The MCP server: the workspace tools (ls, read, open, search; apply in write mode; ask and feedback when
curating) over stdio or streamable HTTP.

Built on the official `mcp` SDK's low-level `Server`, so each tool's input
schema is exactly the one in `service.TOOL_SCHEMAS`. Tool errors come back as
results with `is_error` set and a readable message, never as crashes.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

from librarian.app.service import APPLY_SCHEMA, TOOL_SCHEMAS, ServiceError, WorkspaceService

# extra tools beside the service's: name -> (spec {"description", "schema"}, handler(arguments) -> {"text", ...})
ExtraTools = dict[str, tuple[dict[str, Any], Any]]


def tool_list(service: WorkspaceService, extra: ExtraTools | None = None) -> list[types.Tool]:
    """The MCP tool records the service offers (and `extra`'s: `ask` and `feedback` under --curate)."""
    specs = {**TOOL_SCHEMAS, **({"apply": APPLY_SCHEMA} if service.write else {}),
             **{n: spec for n, (spec, _) in (extra or {}).items()}}
    return [types.Tool(name=name, description=spec["description"], input_schema=spec["schema"],
                       annotations=types.ToolAnnotations(read_only_hint=name not in ("apply", "feedback"),
                                                         open_world_hint=False))
            for name, spec in specs.items()]


def make_server(service: WorkspaceService, name: str = "librarian-workspace", extra: ExtraTools | None = None) -> Server:
    """An MCP server over `service` (plus the `extra` tools)."""
    extra = extra or {}

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tool_list(service, extra))

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            if params.name in extra:  # a reader's episode: off the event loop
                out = await anyio.to_thread.run_sync(extra[params.name][1], dict(params.arguments or {}))
            else:
                out = service.call(params.name, dict(params.arguments or {}))
        except ServiceError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"error: {exc}")], is_error=True)
        structured = {k: v for k, v in out.items() if k != "text"}
        return types.CallToolResult(content=[types.TextContent(type="text", text=out["text"])],
                                    structured_content=json.loads(json.dumps(structured)) if structured else None)

    return Server(name, version="1", instructions="A librarian workspace: browse with ls/open, read files, search.",
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def run_stdio(service: WorkspaceService, extra: ExtraTools | None = None) -> None:
    """Serve over this process's stdin/stdout until the client disconnects."""
    server = make_server(service, extra=extra)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(service: WorkspaceService, host: str = "127.0.0.1", extra: ExtraTools | None = None) -> Any:
    """A Starlette app serving MCP over streamable HTTP at `/mcp`."""
    return make_server(service, extra=extra).streamable_http_app(host=host)
