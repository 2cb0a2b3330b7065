"""`librarian view SNAPSHOT --out DIR`: a self-contained HTML viewer of a workspace (opens from disk).

One file, inline CSS and JS, the data embedded as JSON: the tree with raw,
synthetic and directory nodes told apart, each node's text, links,
provenance and provenance paths back to raw documents (all clickable), what
references it, and the structure statistics with coverage. `diff` writes the
same viewer with each node's change marked. The page is a jinja2 template
(`templates/viewer.html.j2`) with autoescaping on; the data goes in through
`tojson`, which escapes `<`, `>` and `&`, so no text can end its script block.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from librarian.app.viewer_assets import CSS, JS
from librarian.app.workspace_dir import snapshot_path
from librarian.workspace import SnapshotView
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError
from librarian.workspace.nodes import Node, NodeSource
from librarian.workspace.provenance import provenance_paths
from librarian.workspace.stats import structure_stats

MAX_TEXT = 20_000


def node_record(src: NodeSource, node: Node, status: str | None = None, change: str | None = None) -> dict[str, Any]:
    """A node as the viewer shows it (text cut at MAX_TEXT characters)."""
    rec: dict[str, Any] = {"id": node.id, "path": node.path, "parent": node.parent_path, "kind": node.kind,
                           "text": node.text[:MAX_TEXT], "links": list(node.links),
                           "provenance": list(node.provenance)}
    if len(node.text) > MAX_TEXT:
        rec["truncated"] = True
    if node.kind != "raw" and (node.links or node.provenance):
        rec["chains"] = provenance_paths(src, node.id, max_paths=3)
    if status:
        rec["status"] = status
    if change:
        rec["change"] = change
    return rec


def stats_rows(src: NodeSource) -> list[tuple[str, str]]:
    """Structure statistics as (label, value) rows."""
    s = structure_stats(src)
    return [
        ("active nodes", str(s.active_nodes)), ("raw documents", str(s.raw)), ("synthetic files", str(s.synthetic)),
        ("directories", str(s.directories)), ("clusters", str(s.clusters)), ("merges", str(s.merges)),
        ("max depth", str(s.max_depth)), ("mean depth", f"{s.mean_depth:.2f}"), ("links", str(s.total_links)),
        ("provenance edges", str(s.total_provenance)),
        ("index out-degree median / mean / max", f"{s.out_degree_median:g} / {s.out_degree_mean:.1f} / {s.out_degree_max}"),
        ("empty indexes", str(s.empty_indexes)),
        ("coverage, one hop", f"{s.coverage_one_hop:.1%}"), ("coverage, two hops", f"{s.coverage_two_hop:.1%}"),
    ]


@functools.cache
def _template() -> Any:
    env = jinja2.Environment(loader=jinja2.PackageLoader("librarian.app", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "separators": (",", ":")}
    return env.get_template("viewer.html.j2")


def render_html(title: str, subtitle: str, records: Iterable[dict[str, Any]], rows: list[tuple[str, str]],
                diff: dict[str, Any] | None = None) -> str:
    """The viewer page with `records` embedded."""
    data = {"title": title, "subtitle": subtitle, "nodes": list(records), "stats_rows": rows, "diff": diff}
    return _template().render(title=title, data=data, css=Markup(CSS), js=Markup(JS))  # the assets are ours


def view_html(src: NodeSource, title: str) -> str:
    """The viewer page of one snapshot."""
    nodes = list(src)
    kinds = {k: sum(1 for n in nodes if n.kind == k) for k in ("raw", "synthetic", "directory")}
    sub = f"{len(nodes)} nodes: {kinds['raw']} raw, {kinds['synthetic']} synthetic, {kinds['directory']} directories"
    return render_html(title, sub, (node_record(src, n) for n in nodes), stats_rows(src))


def write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def main(argv: Sequence[str]) -> int:
    """CLI entry: `librarian view SNAPSHOT [--out DIR]`."""
    p = argparse.ArgumentParser(prog="librarian view", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("snapshot", help="a build folder or a snapshot .parquet")
    p.add_argument("--out", help="folder for viewer.html and results.json (default: beside the snapshot, view/)")
    args = p.parse_args(list(argv))
    try:
        snap = snapshot_path(args.snapshot)
        src = SnapshotView.from_parquet(snap)
    except (WorkspaceError, SnapshotFormatError) as exc:
        print(f"librarian view: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else snap.parent / "view"
    page = write_atomic(out / "viewer.html", view_html(src, f"workspace {snap}"))
    stats = structure_stats(src).as_dict()
    results = {"snapshot": str(snap), "viewer": str(page), "bytes": page.stat().st_size, "structure": stats}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {page} ({page.stat().st_size / 1e6:.1f} MB): open it in a browser, no server needed")
    return 0
