"""`librarian diff A B`: what changed between two snapshots, as text and in the HTML viewer.

Nodes are matched by id. A node is `added` (active in B only), `removed`
(active in A only), `edited` (text changed), `moved` (path changed) or
`relinked` (links or provenance changed); one node can be edited, moved and
relinked at once (its status is the first of those).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian.app.viewer import node_record, render_html, stats_rows, write_atomic
from librarian.app.workspace_dir import snapshot_path
from librarian.workspace import SnapshotView
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError
from librarian.workspace.nodes import Node, NodeSource


@dataclass(frozen=True, slots=True)
class NodeChange:
    """How one node present in both snapshots changed."""

    id: str
    path: str
    old_path: str
    text_changed: bool
    chars_delta: int
    links_added: tuple[str, ...]
    links_removed: tuple[str, ...]
    provenance_added: tuple[str, ...]
    provenance_removed: tuple[str, ...]

    @property
    def status(self) -> str:
        if self.text_changed:
            return "edited"
        if self.path != self.old_path:
            return "moved"
        return "relinked"

    def describe(self) -> str:
        parts = []
        if self.text_changed:
            parts.append(f"text edited ({self.chars_delta:+d} chars)")
        if self.path != self.old_path:
            parts.append(f"moved from {self.old_path}")
        for name, ids in (("links +", self.links_added), ("links -", self.links_removed),
                          ("provenance +", self.provenance_added), ("provenance -", self.provenance_removed)):
            if ids:
                parts.append(f"{name}{len(ids)}")
        return "; ".join(parts)


@dataclass
class SnapshotDiff:
    """Added, removed and changed nodes between snapshot A and snapshot B."""

    added: list[Node] = field(default_factory=list)
    removed: list[Node] = field(default_factory=list)
    changed: list[NodeChange] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        by = {s: sum(1 for c in self.changed if c.status == s) for s in ("edited", "moved", "relinked")}
        return {"added": len(self.added), "removed": len(self.removed), **by,
                "links_added": sum(len(c.links_added) for c in self.changed) + sum(len(n.links) for n in self.added),
                "links_removed": sum(len(c.links_removed) for c in self.changed)
                + sum(len(n.links) for n in self.removed)}

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        c = self.counts()
        return (f"{c['added']} added, {c['removed']} removed, {c['edited']} edited, {c['moved']} moved, "
                f"{c['relinked']} relinked; links +{c['links_added']} -{c['links_removed']}")


def _gone(old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    keep = set(new)
    return tuple(i for i in old if i not in keep)


def diff_snapshots(a: NodeSource, b: NodeSource) -> SnapshotDiff:
    """Compare the active nodes of two snapshots by id (order: B's order, then A's removed nodes)."""
    old = {n.id: n for n in a}
    out = SnapshotDiff()
    seen = set()
    for node in b:
        seen.add(node.id)
        before = old.get(node.id)
        if before is None:
            out.added.append(node)
            continue
        change = NodeChange(node.id, node.path, before.path, before.text != node.text,
                            len(node.text) - len(before.text), _gone(node.links, before.links),
                            _gone(before.links, node.links), _gone(node.provenance, before.provenance),
                            _gone(before.provenance, node.provenance))
        if (change.text_changed or change.path != change.old_path or change.links_added or change.links_removed
                or change.provenance_added or change.provenance_removed):
            out.changed.append(change)
    out.removed = [n for i, n in old.items() if i not in seen]
    return out


def diff_text(d: SnapshotDiff, a_name: str, b_name: str, limit: int = 200) -> str:
    """A readable listing: `+` added, `-` removed, `~` changed."""
    lines = [f"diff {a_name} -> {b_name}: {d.summary()}"]
    rows = ([f"+ {n.path}  [{n.kind}]" for n in d.added] + [f"- {n.path}  [{n.kind}]" for n in d.removed]
            + [f"~ {c.path}  {c.describe()}" for c in d.changed])
    lines += rows[:limit]
    if len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more (see the HTML viewer)")
    return "\n".join(lines)


def diff_html(a: NodeSource, b: NodeSource, d: SnapshotDiff, a_name: str, b_name: str) -> str:
    """The viewer of B with every change marked, plus A's removed nodes."""
    status = {n.id: ("added", None) for n in d.added}
    status.update({c.id: (c.status, c.describe()) for c in d.changed})
    records = [node_record(b, n, *status.get(n.id, (None, None))) for n in b]
    records += [node_record(a, n, "removed") for n in d.removed]
    info = {"a": a_name, "b": b_name, "summary": d.summary(), "counts": d.counts()}
    return render_html(f"diff {a_name} -> {b_name}", d.summary(), records, stats_rows(b), info)


def main(argv: Sequence[str]) -> int:
    """CLI entry: `librarian diff A B [--out DIR]`."""
    p = argparse.ArgumentParser(prog="librarian diff", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="the earlier snapshot (build folder or .parquet)")
    p.add_argument("b", help="the later snapshot")
    p.add_argument("--out", help="folder for diff.html, diff.txt and results.json")
    p.add_argument("--limit", type=int, default=200, help="lines of the text listing")
    args = p.parse_args(list(argv))
    try:
        pa_, pb = snapshot_path(args.a), snapshot_path(args.b)
        a, b = SnapshotView.from_parquet(pa_), SnapshotView.from_parquet(pb)
    except (WorkspaceError, SnapshotFormatError) as exc:
        print(f"librarian diff: {exc}", file=sys.stderr)
        return 2
    d = diff_snapshots(a, b)
    text = diff_text(d, str(args.a), str(args.b), args.limit)
    print(text)
    if args.out:
        out = Path(args.out)
        page = write_atomic(out / "diff.html", diff_html(a, b, d, str(args.a), str(args.b)))
        write_atomic(out / "diff.txt", diff_text(d, str(args.a), str(args.b), limit=10**9) + "\n")
        results: dict[str, Any] = {"a": str(pa_), "b": str(pb), **d.counts(), "html": str(page)}
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {page} and {out / 'diff.txt'}")
    return 0
