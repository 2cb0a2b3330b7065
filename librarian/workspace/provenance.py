"""Provenance paths: from a file an agent read back to the raw documents it was derived from.

A path follows `provenance` edges (what a node was made from); a synthetic
node without provenance follows its `links` (an index document points at its
members), and a directory its README's links. Paths end at raw nodes.
"""

from __future__ import annotations

from librarian.workspace.nodes import Node, NodeSource


def _sources(node: Node) -> tuple[str, ...]:
    if node.provenance:
        return node.provenance
    return node.links if node.kind in ("synthetic", "directory") else ()


def provenance_paths(src: NodeSource, node_id: str, max_paths: int = 5, max_depth: int = 6) -> list[list[str]]:
    """Up to `max_paths` chains of node paths from `node_id` to raw nodes (breadth first, shortest first).

    A raw node's chain is itself. A node whose sources never reach a raw node
    gives no chain.
    """
    start = src.get(node_id)
    if start is None:
        return []
    if start.kind == "raw":
        return [[start.path]]
    out: list[list[str]] = []
    frontier: list[list[Node]] = [[start]]
    seen = {start.id}
    for _ in range(max_depth):
        nxt: list[list[Node]] = []
        for chain in frontier:
            for sid in _sources(chain[-1]):
                if sid in seen:
                    continue
                node = src.get(sid)
                if node is None:
                    continue
                seen.add(sid)
                if node.kind == "raw":
                    out.append([n.path for n in chain] + [node.path])
                    if len(out) >= max_paths:
                        return out
                else:
                    nxt.append(chain + [node])
        if not nxt:
            break
        frontier = nxt
    return out


def raw_sources(src: NodeSource, node_id: str, limit: int = 1000) -> list[str]:
    """Ids of every raw node reachable from `node_id` by provenance paths (itself if raw)."""
    paths = provenance_paths(src, node_id, max_paths=limit)
    ids = []
    for chain in paths:
        node = src.by_path(chain[-1])
        if node is not None:
            ids.append(node.id)
    return list(dict.fromkeys(ids))
