"""Agent views: the text an agent sees for `ls`, `read`, `open` and `tree`, and what it cost.

Every view works on any `NodeSource` (the live `Workspace` or a
`SnapshotView`) and returns a `ViewResult`. The exact text formats are part of
the contract (docs/workspace.md, "Views and costs"); tests pin them.

Cost: `chars` is the length of the returned text, `est_tokens` is
ceil(chars / 4) (a common English estimate; tokenizer-free so it is the same
everywhere), and `nodes_touched` are the nodes whose text appears in the
result (`ls` and `tree` show names only, so they touch none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Node, NodeSource
from librarian.workspace.paths import normalize_path

CHARS_PER_TOKEN = 4
ReadMode = Literal["lines", "kbgym"]


@dataclass(frozen=True, slots=True)
class ViewCost:
    """What a view cost the agent: characters, estimated tokens, nodes whose text it read."""

    chars: int
    est_tokens: int
    nodes_touched: tuple[str, ...]
    raw_touched: int
    synthetic_touched: int


@dataclass(frozen=True, slots=True)
class ViewResult:
    """The text an agent sees, and its cost."""

    text: str
    cost: ViewCost


def estimate_tokens(chars: int) -> int:
    """ceil(chars / 4): the token estimate every view reports."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def _result(text: str, touched: list[Node]) -> ViewResult:
    ids = tuple(dict.fromkeys(n.id for n in touched))
    kinds = {n.id: n.kind for n in touched}
    cost = ViewCost(
        chars=len(text),
        est_tokens=estimate_tokens(len(text)),
        nodes_touched=ids,
        raw_touched=sum(1 for i in ids if kinds[i] == "raw"),
        synthetic_touched=sum(1 for i in ids if kinds[i] == "synthetic"),
    )
    return ViewResult(text=text, cost=cost)


def _shown(path: str) -> str:
    return path if path else "/"


def _child_count(src: NodeSource, path: str) -> int:
    counter = getattr(src, "child_count", None)
    return counter(path) if counter is not None else len(src.children(path))


def _folder(src: NodeSource, path: object) -> tuple[str, Node | None]:
    """Resolve a path that must be the root or a node that can hold children."""
    norm = normalize_path(path)
    if norm == "":
        return norm, None
    node = src.by_path(norm)
    if node is None:
        raise WorkspaceError(f"no file or folder at {norm!r}; use ls('') to see what exists")
    if node.kind != "directory" and _child_count(src, norm) == 0:
        raise WorkspaceError(f"{norm!r} is a file with nothing under it; use read({norm!r}) to see its text")
    return norm, node


def _entry_line(src: NodeSource, node: Node) -> str:
    count = _child_count(src, node.path)
    parts = []
    if node.kind != "directory":
        parts.append(f"{len(node.text)} chars")
    if count or node.kind == "directory":
        parts.append(f"{count} entries" if count != 1 else "1 entry")
    slash = "/" if count or node.kind == "directory" else ""
    return f"  {node.name}{slash}  {node.kind}  {', '.join(parts)}"


def _listing(src: NodeSource, path: str) -> str:
    kids = src.children(path)
    noun = "entry" if len(kids) == 1 else "entries"
    lines = [f"ls {_shown(path)}: {len(kids)} {noun}"]
    lines.extend(_entry_line(src, k) for k in kids)
    return "\n".join(lines)


def ls(src: NodeSource, path: str = "") -> ViewResult:
    """List what lies directly under `path` ('' is the root).

    Format: a header `ls <path>: <n> entries`, then one line per child,
    sorted by path: `  <name>[/]  <kind>  <chars> chars[, <n> entries]`;
    a trailing '/' marks a child that has entries (a directory always has).
    """
    norm, _ = _folder(src, path)
    return _result(_listing(src, norm), [])


def resolve(src: NodeSource, path_or_id: object) -> Node:
    """The active node at this path, else with this id; `WorkspaceError` if neither exists."""
    if not isinstance(path_or_id, str):
        raise WorkspaceError(f"expected a path or id string, got {type(path_or_id).__name__}")
    try:
        norm = normalize_path(path_or_id)
    except WorkspaceError:
        norm = None
    node = src.by_path(norm) if norm else None
    if node is None:
        node = src.get(path_or_id)
    if node is None:
        raise WorkspaceError(f"no file at {path_or_id[:200]!r}; use ls to see what exists")
    return node


def _check_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkspaceError(f"{name} must be an integer, got {value!r:.80}")
    return value


def _line_range(node: Node, start_line: object, num_lines: object) -> tuple[int, int, list[str]]:
    lines = node.text.splitlines()
    start = _check_int(start_line, "start_line")
    if start < 1:
        raise WorkspaceError(f"start_line must be 1 or more, got {start}")
    if num_lines is not None and _check_int(num_lines, "num_lines") < 1:
        raise WorkspaceError(f"num_lines must be 1 or more (or omitted for the rest of the file), got {num_lines}")
    if start > max(len(lines), 1):
        raise WorkspaceError(
            f"start_line {start} is past the end of {node.path!r}, which has {len(lines)} lines; start at 1 to {max(len(lines), 1)}"
        )
    if not lines:
        return 0, 0, []
    stop = len(lines) if num_lines is None else min(len(lines), start - 1 + num_lines)  # type: ignore[operator]
    return start, stop, lines[start - 1 : stop]


def _header(node: Node) -> str:
    return f"[{node.kind}] {node.path}  id={node.id}"


def read(
    src: NodeSource,
    path_or_id: str,
    start_line: int = 1,
    num_lines: int | None = None,
    mode: ReadMode = "lines",
    sources: bool = False,
) -> ViewResult:
    """Read a node's text (a line range of it), and in `kbgym` mode every node it links.

    Format: `[<kind>] <path>  id=<id>  lines <a>-<b> of <n>`, then
    `links: <ids>` and `provenance: <ids>` when not empty, then `---` and the
    lines. In `kbgym` mode each linked active node follows in link order as
    a blank line, `=== linked: [<kind>] <path>  id=<id> ===` and its full text.
    With `sources` (kbgym mode), the raw documents the node and its linked
    nodes were made from (their provenance, at most `MAX_SOURCES`, those not
    already shown) follow as `=== source: [raw] <path>  id=<id> ===` and their
    text: a reader can check a synthetic file against the documents it cites.
    """
    if mode not in ("lines", "kbgym"):
        raise WorkspaceError(f"read mode must be 'lines' or 'kbgym', got {mode!r:.80}")
    node = resolve(src, path_or_id)
    start, stop, lines = _line_range(node, start_line, num_lines)
    total = len(node.text.splitlines())
    out = [f"{_header(node)}  lines {start}-{stop} of {total}"]
    if node.links:
        out.append("links: " + ", ".join(node.links))
    if node.provenance:
        out.append("provenance: " + ", ".join(node.provenance))
    out.append("---")
    out.extend(lines)
    touched = [node]
    if mode == "kbgym":
        for target_id in dict.fromkeys(node.links):
            target = src.get(target_id)
            if target is None or target.id == node.id:
                continue
            out.append("")
            out.append(f"=== linked: {_header(target)} ===")
            out.append(target.text)
            touched.append(target)
        if sources:
            for source in provenance_sources(src, touched):
                out.append("")
                out.append(f"=== source: {_header(source)} ===")
                out.append(source.text)
                touched.append(source)
    return _result("\n".join(out), touched)


MAX_SOURCES = 40  # raw sources a kbgym read shows at most (LinkMany's cap on targets)


def provenance_sources(src: NodeSource, shown: list[Node], limit: int = MAX_SOURCES) -> list[Node]:
    """The active raw nodes in the provenance of `shown` (in order, each once), leaving out nodes already shown."""
    seen = {n.id for n in shown}
    out: list[Node] = []
    for node in shown:
        for source_id in node.provenance:
            source = src.get(source_id)
            if source is None or source.id in seen or source.kind != "raw":
                continue
            seen.add(source.id)
            out.append(source)
            if len(out) >= limit:
                return out
    return out


def open(src: NodeSource, path: str = "") -> ViewResult:  # noqa: A001 - the agent's verb
    """A folder's README (its node's text) followed by its listing.

    Format: `README of <path>:`, the README text (or `(no README)`), a blank
    line, then exactly the `ls` text.
    """
    norm, node = _folder(src, path)
    readme = node.text if node is not None and node.text else "(no README)"
    text = f"README of {_shown(norm)}:\n{readme}\n\n{_listing(src, norm)}"
    return _result(text, [node] if node is not None else [])


def tree(src: NodeSource, path: str = "", max_depth: int | None = None) -> ViewResult:
    """The names under `path` as an indented tree, two spaces per level.

    Format: the first line is the path (`/` for the root); each node follows
    on its own line as `<indent><name>[/]`; a node with entries deeper than
    `max_depth` ends in `/ (<n> entries not shown)`.
    """
    if max_depth is not None and _check_int(max_depth, "max_depth") < 1:
        raise WorkspaceError(f"max_depth must be 1 or more (or omitted for the whole tree), got {max_depth}")
    norm, _ = _folder(src, path)
    out = [_shown(norm)]

    def walk(parent: str, depth: int) -> None:
        for child in src.children(parent):
            count = _child_count(src, child.path)
            indent = "  " * depth
            if not count and child.kind != "directory":
                out.append(f"{indent}{child.name}")
            elif max_depth is not None and depth >= max_depth and count:
                out.append(f"{indent}{child.name}/ ({count} {'entry' if count == 1 else 'entries'} not shown)")
            else:
                out.append(f"{indent}{child.name}/")
                walk(child.path, depth + 1)

    walk(norm, 1)
    return _result("\n".join(out), [])
