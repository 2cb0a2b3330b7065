"""What a tool is: its schema, the roles that get it, its action cost, and how it runs.

Each concrete tool is defined once, as a `Tool` record, in `reader_tools`,
`curator_tools` or `builder_tools`; `toolbox` collects them. A tool runs
against a `ToolContext` (the workspace view, the search index) and returns a
`ToolResult`: the observation text plus what it cost. A tool reports a bad
request by raising `ToolInputError` or `WorkspaceError`; `run_tool` turns
either into an error observation that still costs the action.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Node, NodeSource
from librarian.workspace.views import ViewResult, estimate_tokens

if TYPE_CHECKING:
    from librarian.search.base import SearchIndex
    from librarian.search.sync import IndexSync
    from librarian.workspace.store import Workspace
from librarian.search.errors import SearchError
from librarian.workspace.store import Workspace

KBGYM_READER = "kbgym_reader"
KBGYM_CURATOR = "kbgym_curator"
LIBRARIAN_ANSWERER = "librarian_answerer"
LIBRARIAN_BUILDER = "librarian_builder"
AnswerView = Literal["all", "synthetic", "synthetic+raw_fallback"]


class ToolInputError(ValueError):
    """A call was well-formed but cannot be served (for example no search index is attached)."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """An observation and its cost. `terminal` ends the episode (answer, done, stop)."""

    text: str
    actions: int = 1
    nodes_touched: tuple[str, ...] = ()
    raw_touched: int = 0
    synthetic_touched: int = 0
    ok: bool = True
    terminal: bool = False
    answer: str | None = None
    changed: bool = False  # the workspace was modified

    @property
    def chars(self) -> int:
        return len(self.text)

    @property
    def est_tokens(self) -> int:
        return estimate_tokens(len(self.text))


def from_view(view: ViewResult, actions: int = 1) -> ToolResult:
    """A view's text and the nodes it touched, as a tool result."""
    c = view.cost
    return ToolResult(view.text, actions, c.nodes_touched, c.raw_touched, c.synthetic_touched)


def touched(text: str, nodes: list[Node], actions: int = 1) -> ToolResult:
    """A result whose text shows these nodes' content."""
    ids = tuple(dict.fromkeys(n.id for n in nodes))
    kinds = {n.id: n.kind for n in nodes}
    return ToolResult(text, actions, ids, sum(kinds[i] == "raw" for i in ids), sum(kinds[i] == "synthetic" for i in ids))


@dataclass
class ToolContext:
    """What tools run against: a workspace (or read-only snapshot view) and optionally a search index.

    `sync` keeps the index in step after curator edits (BM25 at once; the
    embedding batch waits for the end of the iteration). `answer_view`
    restricts the Librarian answerer to synthetic files, optionally letting
    it read a raw document it names (its provenance) as a fallback.
    """

    workspace: NodeSource
    index: SearchIndex | None = None
    sync: IndexSync | None = None
    search_mode: str = "bm25"
    snippet_chars: int = 500
    answer_view: AnswerView = "all"
    read_sources: bool = False  # a KBGym read also shows the raw documents a synthetic file was made from
    extra: dict[str, Any] = field(default_factory=dict)

    def writable(self) -> Workspace:
        """The live workspace, for tools that edit; a snapshot view cannot be edited."""
        if not isinstance(self.workspace, Workspace):
            raise ToolInputError("this workspace is a frozen snapshot; editing tools are not available on it")
        return self.workspace

    def after_edit(self) -> None:
        """Let the search index see the edit (BM25 now; embeddings at the end of the iteration)."""
        if self.sync is not None:
            self.sync.sync(embed=False)


RunFn = Callable[[ToolContext, dict[str, Any]], ToolResult]


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool. `key` is unique in the toolbox; `name` is what the model calls (two roles' `read`s differ)."""

    key: str
    name: str
    description: str
    parameters: dict[str, Any]
    roles: frozenset[str]
    run: RunFn
    cost: int = 1
    terminal: bool = False

    def schema(self) -> dict[str, Any]:
        """The OpenAI / Qwen function-calling schema."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def params(required: list[str] | None = None, **props: dict[str, Any]) -> dict[str, Any]:
    """An object schema with these properties, no others allowed."""
    return {"type": "object", "properties": props, "required": list(required or []), "additionalProperties": False}


STRING = {"type": "string", "minLength": 1}
ANY_STRING = {"type": "string"}
ID = {"type": "string", "minLength": 1, "description": "a document id"}


def run_tool(tool: Tool, ctx: ToolContext, arguments: dict[str, Any]) -> ToolResult:
    """Run a tool; a `WorkspaceError` / `ToolInputError` / search error becomes an error observation."""
    try:
        result = tool.run(ctx, arguments)
    except (WorkspaceError, ToolInputError, SearchError) as exc:
        return ToolResult(f"error ({tool.name}): {exc}", actions=tool.cost, ok=False)
    return replace(result, actions=tool.cost)


class FilteredSource:
    """A `NodeSource` that shows only some node kinds (the answerer's synthetic-only view)."""

    def __init__(self, source: NodeSource, kinds: frozenset[str]) -> None:
        self.source = source
        self.kinds = kinds

    def _ok(self, node: Node | None) -> Node | None:
        return node if node is not None and node.kind in self.kinds else None

    def get(self, node_id: str) -> Node | None:
        return self._ok(self.source.get(node_id))

    def by_path(self, path: str) -> Node | None:
        return self._ok(self.source.by_path(path))

    def children(self, path: str) -> list[Node]:
        return [n for n in self.source.children(path) if n.kind in self.kinds]

    def __iter__(self) -> Iterator[Node]:
        return (n for n in self.source if n.kind in self.kinds)

    def __len__(self) -> int:
        return sum(1 for _ in self)
