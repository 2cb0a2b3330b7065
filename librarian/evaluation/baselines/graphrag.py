"""GraphRAG-style baseline: entities, co-occurrence communities, one summary document per community.

Entities are read from every raw document (`common.entities`); two entities
co-occurring in a document share an edge weighted by how many documents they
share. Louvain communities (networkx, seeded) partition that graph; each
community of at least `min_docs` member documents gets one summary document
under `communities/`: a title naming its most connected entities, then an
extractive summary of its members (the content executor), its provenance and
links being the documents that mention any of its entities.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

import networkx as nx

from librarian.evaluation.baselines.common import (
    BaselineError,
    BuildResult,
    apply_ops,
    corpus_tokens,
    entities,
    extractive_summary,
    link_ops,
    raw_documents,
    written_tokens,
)
from librarian.workspace import CreateFile, MakeDir, Op, Workspace


@dataclass(frozen=True, slots=True)
class GraphRAGOptions:
    """Louvain `resolution` (higher: more, smaller communities), `seed`, and what a summary holds."""

    resolution: float = 1.0
    seed: int = 0
    min_docs: int = 2
    title_entities: int = 12
    summary_sentences: int = 6
    folder: str = "communities"


def communities(doc_entities: dict[str, list[str]], resolution: float, seed: int) -> list[list[str]]:
    """Louvain communities of the entity co-occurrence graph, largest first (ties: first entity)."""
    graph = nx.Graph()
    for ents in doc_entities.values():
        graph.add_nodes_from(ents)
        for a, b in combinations(sorted(set(ents)), 2):
            w = graph.get_edge_data(a, b, {"weight": 0})["weight"]
            graph.add_edge(a, b, weight=w + 1)
    if graph.number_of_nodes() == 0:
        return []
    found = nx.community.louvain_communities(graph, weight="weight", resolution=resolution, seed=seed)
    groups = [sorted(c) for c in found]
    return sorted(groups, key=lambda c: (-len(c), c[0]))


def plan(ws: Workspace, options: GraphRAGOptions) -> tuple[list[Op], dict]:
    """The ops that add one summary document per community, and figures about them."""
    if options.resolution <= 0:
        raise BaselineError(f"graphrag: resolution must be > 0, got {options.resolution}")
    docs = raw_documents(ws)
    text_of = dict(docs)
    doc_entities = {doc_id: entities(text) for doc_id, text in docs}
    mentioned_by: dict[str, list[str]] = defaultdict(list)
    for doc_id, ents in doc_entities.items():
        for e in ents:
            mentioned_by[e].append(doc_id)
    groups = communities(doc_entities, options.resolution, options.seed)
    ops: list[Op] = [MakeDir(options.folder, "One summary per community of co-occurring entities (GraphRAG-style); "
                                             "each links the documents that mention its entities.")]
    sizes = []
    for i, group in enumerate(groups):
        members = list(dict.fromkeys(d for e in group for d in mentioned_by[e]))
        if len(members) < options.min_docs:
            continue
        degree = {e: len(mentioned_by[e]) for e in group}
        title = sorted(group, key=lambda e: (-degree[e], e))[: options.title_entities]
        summary = extractive_summary([text_of[d] for d in members], options.summary_sentences)
        path = f"{options.folder}/community-{i:03d}"
        ops.append(CreateFile(path, f"Community {i}: {', '.join(title)}\n{summary}", tuple(members)))
        ops += link_ops(path, members)
        sizes.append(len(members))
    info = {"entities": len(mentioned_by), "communities": len(groups), "summaries": len(sizes),
            "mean_members": sum(sizes) / len(sizes) if sizes else 0.0}
    return ops, info


def build_graphrag(ws: Workspace, options: GraphRAGOptions | None = None) -> BuildResult:
    """A copy of `ws` with the community summaries added through workspace ops."""
    options = options or GraphRAGOptions()
    out = ws.copy()
    ops, info = plan(out, options)
    n = apply_ops(out, ops, "graphrag")
    cost = corpus_tokens(t for _, t in raw_documents(ws)) + written_tokens(ops)
    return BuildResult("graphrag", out, n, cost, info)
