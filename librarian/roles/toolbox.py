"""The toolbox: every tool by key, and the tools each role gets."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from librarian.roles.builder_tools import BUILDER_TOOLS
from librarian.roles.curator_tools import CURATOR_TOOLS
from librarian.roles.reader_tools import READER_TOOLS
from librarian.roles.researcher_tools import RESEARCHER_TOOLS
from librarian.roles.tools import Tool

TOOLS: dict[str, Tool] = {}
for _tool in (*READER_TOOLS, *CURATOR_TOOLS, *BUILDER_TOOLS, *RESEARCHER_TOOLS):
    if _tool.key in TOOLS:
        raise RuntimeError(f"two tools share the key {_tool.key!r}")
    TOOLS[_tool.key] = _tool


def tool_keys_for(role: str) -> tuple[str, ...]:
    """Keys of the tools a role gets, in toolbox order."""
    keys = tuple(k for k, t in TOOLS.items() if role in t.roles)
    if not keys:
        raise KeyError(f"no tools are registered for role {role!r}")
    return keys


def get_tools(keys: Iterable[str]) -> dict[str, Tool]:
    """The tools with these keys, by the name the model calls; names must be unique within one set."""
    out: dict[str, Tool] = {}
    for key in keys:
        if key not in TOOLS:
            raise KeyError(f"unknown tool key {key!r}; known: {', '.join(TOOLS)}")
        tool = TOOLS[key]
        if tool.name in out:
            raise ValueError(f"tools {out[tool.name].key!r} and {key!r} are both called {tool.name!r}")
        out[tool.name] = tool
    return out


def schemas(tools: dict[str, Tool]) -> list[dict[str, Any]]:
    """OpenAI function schemas of a tool set, in order."""
    return [t.schema() for t in tools.values()]
