"""HippoRAG-2-style baseline: triples per document, entity hub documents, entity-sharing links.

OpenIE is the triple reader of `common.triples` (exact on KBGym fact
sentences). Every entity named by at least `min_docs` documents gets a hub
document under `entities/` whose text is the entity's name (a phrase node)
and whose links and provenance are the passages that name it (context
edges). Hubs of two entities that share a triple are linked both ways
(relation edges): the entity-sharing links a reader follows from one hub to
the next. Triples are kept as edges, not as text, so search over the store
still sees only the passages and the names.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from librarian.evaluation.baselines.common import (
    BaselineError,
    BuildResult,
    apply_ops,
    corpus_tokens,
    entities,
    link_ops,
    raw_documents,
    slug,
    triples,
    unique_path,
    written_tokens,
)
from librarian.workspace import Add, MakeDir, Op, Workspace


@dataclass(frozen=True, slots=True)
class HippoRAGOptions:
    """Hubs for entities named by `min_docs`..`max_passages` documents; `relation_links` adds hub-hub edges."""

    min_docs: int = 1
    max_passages: int = 400
    relation_links: bool = True
    folder: str = "entities"


def plan(ws: Workspace, options: HippoRAGOptions) -> tuple[list[Op], dict]:
    """Hub creation ops first (so every hub exists), then context links, then relation links."""
    if options.min_docs < 1 or options.max_passages < options.min_docs:
        raise BaselineError(f"hipporag: need 1 <= min_docs <= max_passages, got {options.min_docs}, "
                            f"{options.max_passages}")
    docs = raw_documents(ws)
    passages: dict[str, list[str]] = defaultdict(list)
    related: dict[str, set[str]] = defaultdict(set)
    n_triples = 0
    for doc_id, text in docs:
        for t in triples(text):
            n_triples += 1
            related[t.subj].add(t.obj)
            related[t.obj].add(t.subj)
        for e in entities(text):
            passages[e].append(doc_id)
    kept = sorted(e for e, ids in passages.items() if options.min_docs <= len(ids) <= options.max_passages)
    taken = {n.path for n in ws}
    hub_path: dict[str, str] = {}
    ops: list[Op] = [MakeDir(options.folder, "One hub per entity (HippoRAG-style phrase nodes): it links the "
                                             "passages that name it and the hubs of entities it shares a triple with.")]
    for e in kept:
        hub_path[e] = unique_path(options.folder, slug(e), taken)
        ops.append(Add(e, path=hub_path[e], provenance=tuple(dict.fromkeys(passages[e]))))
    for e in kept:
        ops += link_ops(hub_path[e], passages[e])
    relation_edges = 0
    if options.relation_links:
        for e in kept:
            others = [hub_path[o] for o in sorted(related[e]) if o in hub_path and o != e]
            relation_edges += len(others)
            ops += link_ops(hub_path[e], others)
    info = {"triples": n_triples, "entities": len(passages), "hubs": len(kept), "relation_edges": relation_edges}
    return ops, info


def build_hipporag(ws: Workspace, options: HippoRAGOptions | None = None) -> BuildResult:
    """A copy of `ws` with entity hubs and their links added through workspace ops."""
    options = options or HippoRAGOptions()
    out = ws.copy()
    ops, info = plan(out, options)
    n = apply_ops(out, ops, "hipporag")
    cost = corpus_tokens(t for _, t in raw_documents(ws)) + written_tokens(ops)
    return BuildResult("hipporag", out, n, cost, info)
