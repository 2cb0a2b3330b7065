"""Structure statistics per workspace (paper 000 Tables 4-5, paper 001 Fig. 4), from `workspace.stats`."""

from __future__ import annotations

from collections.abc import Mapping

from librarian.workspace.nodes import NodeSource
from librarian.workspace.stats import StructureStats, structure_stats

# the fields the structure plot and results tables show, with their labels
HEADLINE: dict[str, str] = {
    "synthetic": "active synthetic files",
    "clusters": "clusters",
    "merges": "merges",
    "max_depth": "max depth",
    "out_degree_mean": "mean index out-degree",
    "empty_indexes": "empty indexes",
    "coverage_one_hop": "coverage (one hop)",
}


def structure_table(stores: Mapping[str, NodeSource | StructureStats]) -> dict[str, StructureStats]:
    """`StructureStats` per named store (stores given as workspaces or already computed)."""
    if not stores:
        raise ValueError("structure_table needs at least one store")
    return {name: s if isinstance(s, StructureStats) else structure_stats(s) for name, s in stores.items()}


def headline(stats: StructureStats) -> dict[str, float]:
    """The `HEADLINE` fields of one store as numbers."""
    return {k: float(getattr(stats, k)) for k in HEADLINE}
