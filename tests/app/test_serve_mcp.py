"""`librarian serve` over MCP: the official client library against the server over stdio and streamable HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from librarian.app.service import TOOL_SCHEMAS


def _serve_args(workspace: Path, *extra: str) -> list[str]:
    return ["-m", "librarian.cli", "serve", str(workspace), *extra]


async def _exercise(client: Client) -> dict[str, object]:
    """The checks both transports must pass; returns what was seen."""
    listed = await client.list_tools()
    schemas = {t.name: t.input_schema for t in listed.tools}
    ls = await client.call_tool("ls", {"path": "indexes"})
    read = await client.call_tool("read", {"path": "indexes/city/port-avel"})
    found = await client.call_tool("search", {"query": "Port Avel", "page": 1})
    escape = await client.call_tool("read", {"path": "../../etc/passwd"})
    escape_ls = await client.call_tool("ls", {"path": "/etc"})
    write = await client.call_tool("apply", {"op": {"op": "add", "text": "x"}})
    return {"schemas": schemas, "ls": ls, "read": read, "search": found, "escape": escape, "escape_ls": escape_ls,
            "write": write}


def _check(seen: dict) -> None:
    assert seen["schemas"] == {name: spec["schema"] for name, spec in TOOL_SCHEMAS.items()}
    assert "city/" in seen["ls"].content[0].text and not seen["ls"].is_error
    read = seen["read"]
    assert read.content[0].text.startswith("[synthetic] indexes/city/port-avel")
    assert all(c[-1].startswith("facts/") for c in read.structured_content["provenance_paths"])
    hits = seen["search"].structured_content["hits"]
    assert hits[0]["path"] == "indexes/city/port-avel"
    assert seen["escape"].is_error and "no file at" in seen["escape"].content[0].text
    assert seen["escape_ls"].is_error and "absolute" in seen["escape_ls"].content[0].text
    assert seen["write"].is_error and "unknown tool 'apply'" in seen["write"].content[0].text


def test_mcp_over_stdio(built200: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=_serve_args(built200),
                                   env={"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.getcwd()})

    async def go() -> dict:
        async with Client(params) as client:
            return await _exercise(client)

    _check(anyio.run(go))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def mcp_http(built200: Path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, *_serve_args(built200, "--mcp-http", "--port", str(port))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:]}") from None
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=20)


def test_mcp_over_streamable_http(mcp_http: str) -> None:
    async def go() -> dict:
        async with Client(mcp_http) as client:
            return await _exercise(client)

    _check(anyio.run(go))
