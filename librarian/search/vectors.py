"""An in-memory matrix of unit vectors keyed by node id, searched by exact cosine similarity."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from librarian.search.base import SearchFilters


def cosine_score(similarity: np.ndarray) -> np.ndarray:
    """Elasticsearch's `dense_vector` cosine score: (1 + cos) / 2, in [0, 1]."""
    return (1.0 + similarity) / 2.0


class VectorStore:
    """Rows of unit vectors with each row's id, kind and path (for filters); rows are reused after removal."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        if dim < 1:
            raise ValueError(f"vector dim must be >= 1, got {dim}")
        self.dim = dim
        self._matrix = np.zeros((capacity, dim), dtype=np.float32)
        self._valid = np.zeros(capacity, dtype=bool)
        self._ids: list[str | None] = [None] * capacity
        self._kinds: list[str] = [""] * capacity
        self._paths: list[str] = [""] * capacity
        self._row_of: dict[str, int] = {}
        self._free: list[int] = []
        self._end = 0  # rows below this index have been used

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._row_of

    def _grow(self) -> None:
        capacity = max(1024, 2 * len(self._valid))
        matrix = np.zeros((capacity, self.dim), dtype=np.float32)
        matrix[: self._end] = self._matrix[: self._end]
        valid = np.zeros(capacity, dtype=bool)
        valid[: self._end] = self._valid[: self._end]
        extra = capacity - len(self._ids)
        self._matrix, self._valid = matrix, valid
        self._ids += [None] * extra
        self._kinds += [""] * extra
        self._paths += [""] * extra

    def put(self, node_id: str, kind: str, path: str, vector: np.ndarray) -> None:
        """Store (or replace) the vector of `node_id`; a zero vector removes it instead."""
        if not np.any(vector):
            self.remove([node_id])
            return
        row = self._row_of.get(node_id)
        if row is None:
            if self._free:
                row = self._free.pop()
            else:
                if self._end == len(self._valid):
                    self._grow()
                row, self._end = self._end, self._end + 1
            self._row_of[node_id] = row
        self._matrix[row] = vector
        self._valid[row] = True
        self._ids[row], self._kinds[row], self._paths[row] = node_id, kind, path

    def relabel(self, node_id: str, kind: str, path: str) -> None:
        """Update the filter fields of a stored vector (a node moved or changed kind)."""
        row = self._row_of.get(node_id)
        if row is not None:
            self._kinds[row], self._paths[row] = kind, path

    def remove(self, ids: Iterable[str]) -> None:
        for node_id in ids:
            row = self._row_of.pop(node_id, None)
            if row is not None:
                self._valid[row] = False
                self._matrix[row] = 0.0
                self._ids[row] = None
                self._free.append(row)

    def _mask(self, filters: SearchFilters) -> np.ndarray:
        mask = self._valid[: self._end].copy()
        if filters.empty:
            return mask
        for row in np.flatnonzero(mask):
            if not filters.matches(self._kinds[row], self._paths[row]):
                mask[row] = False
        return mask

    def top(self, query: np.ndarray, n: int, filters: SearchFilters = SearchFilters()) -> list[tuple[str, float]]:
        """The `n` best (id, score) by cosine score, best first; ties by row order."""
        if self._end == 0 or n < 1:
            return []
        similarity = self._matrix[: self._end] @ np.asarray(query, dtype=np.float32)
        mask = self._mask(filters)
        candidates = np.flatnonzero(mask)
        if candidates.size == 0:
            return []
        sims = similarity[candidates]
        if candidates.size > n:
            part = np.argpartition(-sims, n - 1)[:n]
            candidates, sims = candidates[part], sims[part]
        order = np.lexsort((candidates, -sims))
        scores = cosine_score(sims[order])
        return [(self._ids[int(r)], float(s)) for r, s in zip(candidates[order], scores, strict=True)]

    def export(self) -> tuple[list[str], np.ndarray]:
        """All stored ids and their vectors (row order)."""
        rows = np.flatnonzero(self._valid[: self._end])
        return [self._ids[int(r)] for r in rows], self._matrix[rows].copy()
