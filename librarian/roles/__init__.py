"""Roles, their tools, tool-call parsing, and the episode loop.

A role is a system prompt, a tool set, a budget and a memory window
(`definitions`); each tool is defined once (`reader_tools`, `curator_tools`,
`builder_tools`, `researcher_tools`, collected in `toolbox`); `tool_calls`
parses model output; `environment.ToolEnv` binds a role's tools to a
workspace; `episode` runs a policy backend against any environment and
returns a `Trajectory`. Environments for training: `probing_env.ProbingEnv`
(a build frozen at probe turns for the answerer probe, with hints),
`researcher` (the researcher's rounds) and `researcher_hints`; the judge role
over a backend is `backend_judge`, a scripted teacher tokenized for SFT
`teacher_backend`.
"""

from librarian.roles.definitions import (
    ROLES,
    Role,
    kbgym_curator,
    kbgym_reader,
    librarian_answerer,
    librarian_builder,
)
from librarian.roles.environment import Environment, Reset, Step, ToolEnv
from librarian.roles.episode import LoopConfig, run_episode, run_episodes
from librarian.roles.tool_calls import CallError, ParsedTurn, ToolCall, ToolCallParser, parse_tool_calls
from librarian.roles.toolbox import TOOLS, get_tools, tool_keys_for
from librarian.roles.tools import Tool, ToolContext, ToolResult
from librarian.roles.trajectory import Segment, Trajectory, TurnRecord

__all__ = [
    "ROLES", "TOOLS", "CallError", "Environment", "LoopConfig", "ParsedTurn", "Reset", "Role", "Segment", "Step",
    "Tool", "ToolCall", "ToolCallParser", "ToolContext", "ToolEnv", "ToolResult", "Trajectory", "TurnRecord",
    "get_tools", "kbgym_curator", "kbgym_reader", "librarian_answerer", "librarian_builder", "parse_tool_calls",
    "run_episode", "run_episodes", "tool_keys_for",
]
