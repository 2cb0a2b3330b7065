"""RAPTOR-style baseline: a clustered tree of summaries over the raw documents.

Level 1 clusters the raw documents by embedding (an embedder of the search
layer: bundled MiniLM or the hashing embedder) with k-means into groups of
about `cluster_size`; each group gets a summary file (`CreateFile`, its
provenance and links the members) written by the extractive content
executor. Each higher level clusters the summaries of the level below and
`MergeFiles` every group of two or more under a new summary, which nests
them beneath it, until at most `cluster_size` nodes remain or `max_levels`
is reached. The top nodes are the tree's roots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from librarian.evaluation.baselines.common import (
    BaselineError,
    BuildResult,
    corpus_tokens,
    extractive_summary,
    link_ops,
    raw_documents,
    written_tokens,
)
from librarian.search.embedders import embed_batch, make_embedder
from librarian.workspace import CreateFile, MakeDir, MergeFiles, Op, Workspace


@dataclass(frozen=True, slots=True)
class RaptorOptions:
    """Embedder ('minilm' or 'hashing'), about how many children a summary has, tree depth, seed."""

    embedder: str = "hashing"
    hashing_dim: int = 128
    cluster_size: int = 10
    max_levels: int = 4
    summary_sentences: int = 4
    seed: int = 0
    folder: str = "raptor"


def cluster(vectors: np.ndarray, size: int, seed: int) -> list[list[int]]:
    """k-means groups of about `size` rows (k = ceil(n / size)), ordered by their first row."""
    from sklearn.cluster import KMeans

    n = len(vectors)
    k = max(1, math.ceil(n / size))
    if k == 1 or n <= 1:
        return [list(range(n))]
    labels = KMeans(n_clusters=k, n_init=1, random_state=seed).fit_predict(vectors)
    groups: dict[int, list[int]] = {}
    for row, label in enumerate(labels):
        groups.setdefault(int(label), []).append(row)
    return sorted(groups.values(), key=lambda g: g[0])


def build_raptor(ws: Workspace, options: RaptorOptions | None = None) -> BuildResult:
    """A copy of `ws` with the summary tree added through workspace ops (applied level by level)."""
    options = options or RaptorOptions()
    if options.cluster_size < 2 or options.max_levels < 1:
        raise BaselineError(f"raptor: need cluster_size >= 2 and max_levels >= 1, got {options.cluster_size}, "
                            f"{options.max_levels}")
    embedder = make_embedder(options.embedder, options.hashing_dim)
    if embedder is None:
        raise BaselineError("raptor clusters by embedding: set embedder to 'minilm' or 'hashing', not 'none'")
    out = ws.copy()
    docs = raw_documents(ws)
    applied: list[Op] = []

    def run(ops: list[Op]) -> None:
        for op in ops:
            out.apply(op)
        applied.extend(ops)

    run([MakeDir(options.folder, "A tree of summaries (RAPTOR-style): each summary links what it summarises.")])
    level_ids = [d for d, _ in docs]
    level_texts = [t for _, t in docs]
    counts = []
    for level in range(1, options.max_levels + 1):
        if level > 1 and len(level_ids) <= options.cluster_size:
            break
        groups = cluster(embed_batch(embedder, level_texts), options.cluster_size, options.seed + level)
        next_refs: list[tuple[bool, str]] = []  # (new path?, id or path)
        next_texts, ops = [], []
        for i, group in enumerate(groups):
            ids = [level_ids[j] for j in group]
            texts = [level_texts[j] for j in group]
            if level > 1 and len(group) == 1:  # a lone summary carries over to the next level
                next_refs.append((False, ids[0]))
                next_texts.append(texts[0])
                continue
            summary = extractive_summary(texts, options.summary_sentences)
            path = f"{options.folder}/l{level}-{i:04d}"
            if level == 1:
                ops.append(CreateFile(path, summary, tuple(ids)))
                ops += link_ops(path, ids)
            else:
                ops.append(MergeFiles(tuple(ids), path, summary))
            next_refs.append((True, path))
            next_texts.append(summary)
        run(ops)
        next_ids = [out.id_at(ref) if new else ref for new, ref in next_refs]
        counts.append(len(next_ids))
        if len(next_ids) >= len(level_ids):
            break
        level_ids, level_texts = next_ids, next_texts
    cost = corpus_tokens(t for _, t in docs) + written_tokens(applied)
    return BuildResult("raptor", out, len(applied), cost, {"nodes_per_level": counts, "embedder": embedder.name})
