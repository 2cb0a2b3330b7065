"""Structure statistics of a workspace, as the papers report them.

Pure functions over any `NodeSource`; only active nodes count. Definitions
(docs/workspace.md, "Statistics"):

- clusters: connected components of the undirected graph whose vertices are
  active synthetic nodes and whose edges are links and provenance edges
  between two of them (a merge and its children form one cluster; a lone
  file is a cluster of one). Paper 000, Tables 4-5.
- merges: active synthetic nodes with at least one active node nested under
  their path (what MergeFiles makes).
- depth: the number of path components (a top-level name has depth 1), over
  all active nodes.
- index out-degree: the number of links of each active synthetic node that
  has at least one link; `empty_indexes` counts those with none (paper 001,
  Fig. 4b reports both).
- coverage: the share of active raw nodes reachable from some active
  synthetic node along one edge (one-hop) or at most two edges (two-hop),
  where an edge is a link or a provenance reference and the middle node of a
  two-hop path may be of any kind.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from librarian.workspace.nodes import Node, NodeSource


@dataclass(frozen=True, slots=True)
class StructureStats:
    """Counts and distributions describing a workspace's structure."""

    active_nodes: int
    raw: int
    synthetic: int
    directories: int
    clusters: int
    merges: int
    max_depth: int
    mean_depth: float
    total_links: int
    total_provenance: int
    index_out_degrees: tuple[int, ...]
    out_degree_median: float
    out_degree_mean: float
    out_degree_max: int
    empty_indexes: int
    coverage_one_hop: float
    coverage_two_hop: float

    def as_dict(self) -> dict[str, object]:
        """A JSON-able dict (the out-degree list as a list)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["index_out_degrees"] = list(self.index_out_degrees)
        return out


def depth(path: str) -> int:
    """The number of components of a normalised path ('' has depth 0)."""
    return path.count("/") + 1 if path else 0


def count_clusters(synthetic: list[Node]) -> int:
    """Connected components of synthetic nodes joined by links or provenance between them."""
    parent = {n.id: n.id for n in synthetic}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    components = len(parent)
    for node in synthetic:
        for other in (*node.links, *node.provenance):
            if other in parent:
                a, b = find(node.id), find(other)
                if a != b:
                    parent[a] = b
                    components -= 1
    return components


def coverage(nodes: list[Node]) -> tuple[float, float]:
    """(one-hop, two-hop) share of active raw nodes reachable from active synthetic nodes."""
    by_id = {n.id: n for n in nodes}
    raw_ids = {n.id for n in nodes if n.kind == "raw"}
    if not raw_ids:
        return 0.0, 0.0
    one: set[str] = set()
    for node in nodes:
        if node.kind == "synthetic":
            one.update(t for t in (*node.links, *node.provenance) if t in by_id)
    two = set(one)
    for mid in one:
        node = by_id[mid]
        two.update(t for t in (*node.links, *node.provenance) if t in by_id)
    return len(one & raw_ids) / len(raw_ids), len(two & raw_ids) / len(raw_ids)


def structure_stats(src: NodeSource) -> StructureStats:
    """Compute `StructureStats` over the active nodes of `src`."""
    nodes = list(src)
    synthetic = [n for n in nodes if n.kind == "synthetic"]
    parents = {n.parent_path for n in nodes}
    depths = [depth(n.path) for n in nodes]
    degrees = sorted(len(n.links) for n in synthetic if n.links)
    one_hop, two_hop = coverage(nodes)
    return StructureStats(
        active_nodes=len(nodes),
        raw=sum(1 for n in nodes if n.kind == "raw"),
        synthetic=len(synthetic),
        directories=sum(1 for n in nodes if n.kind == "directory"),
        clusters=count_clusters(synthetic),
        merges=sum(1 for n in synthetic if n.path in parents),
        max_depth=max(depths, default=0),
        mean_depth=statistics.fmean(depths) if depths else 0.0,
        total_links=sum(len(n.links) for n in nodes),
        total_provenance=sum(len(n.provenance) for n in nodes),
        index_out_degrees=tuple(degrees),
        out_degree_median=float(statistics.median(degrees)) if degrees else 0.0,
        out_degree_mean=statistics.fmean(degrees) if degrees else 0.0,
        out_degree_max=max(degrees, default=0),
        empty_indexes=sum(1 for n in synthetic if not n.links),
        coverage_one_hop=one_hop,
        coverage_two_hop=two_hop,
    )
