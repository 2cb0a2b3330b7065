"""Reciprocal rank fusion (Cormack et al. 2009), as Elasticsearch's `retriever.rrf` computes it."""

from __future__ import annotations

from collections.abc import Sequence


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], rank_constant: int = 60,
                           window: int | None = None) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score(d) = sum over lists of 1 / (rank_constant + rank of d), rank from 1.

    Only the first `window` ids of each list count. Returns (id, score) best
    first; ties keep the order in which ids were first seen (list by list).
    """
    if rank_constant < 1:
        raise ValueError(f"rank_constant must be >= 1, got {rank_constant}")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    scores: dict[str, float] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, doc_id in enumerate(ranking[:window] if window else ranking, start=1):
            if doc_id in seen:
                raise ValueError(f"id {doc_id!r} appears twice in one ranking")
            seen.add(doc_id)
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (rank_constant + rank)
    order = {doc_id: i for i, doc_id in enumerate(scores)}
    return sorted(scores.items(), key=lambda item: (-item[1], order[item[0]]))
