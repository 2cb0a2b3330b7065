"""The search contract: hits, modes, filters and the `SearchIndex` protocol."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from librarian.search.errors import SearchError
from librarian.workspace.nodes import NODE_KINDS, Node

SearchMode = Literal["bm25", "dense", "hybrid"]
SEARCH_MODES: tuple[str, ...] = ("bm25", "dense", "hybrid")

# Reciprocal rank fusion settings shared by every backend (Elasticsearch's defaults).
RRF_RANK_CONSTANT = 60
RRF_MIN_WINDOW = 50
MAX_RESULT_WINDOW = 10_000  # Elasticsearch's index.max_result_window


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result. `score` is backend- and mode-specific; compare within one result list."""

    id: str
    path: str
    kind: str
    score: float
    text: str


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Restrict results to some node kinds and/or to paths starting with `path_prefix` (plain string prefix)."""

    kinds: tuple[str, ...] | None = None
    path_prefix: str | None = None

    @property
    def empty(self) -> bool:
        return self.kinds is None and not self.path_prefix

    def matches(self, kind: str, path: str) -> bool:
        """True if a record with this kind and path passes the filters."""
        if self.kinds is not None and kind not in self.kinds:
            return False
        return not self.path_prefix or path.startswith(self.path_prefix)


@dataclass(frozen=True, slots=True)
class SearchRecord:
    """What an index stores per node: the searchable text and the fields a hit carries."""

    id: str
    path: str
    kind: str
    text: str


def record_of(node: Node) -> SearchRecord:
    """The indexable record of a node (a directory is indexed by its README, its `text`)."""
    return SearchRecord(node.id, node.path, node.kind, node.text)


def rrf_window(k: int, offset: int) -> int:
    """How many candidates each retriever contributes to hybrid fusion."""
    return max(RRF_MIN_WINDOW, k + offset)


def check_search_args(query: str, k: int, offset: int, mode: str, kinds: Iterable[str] | None,
                      path_prefix: str | None) -> SearchFilters:
    """Validate a search request; returns its filters. Raises `SearchError` naming the bad argument."""
    if not isinstance(query, str) or not query.strip():
        raise SearchError(f"search query must be a non-empty string, got {query!r}")
    if mode not in SEARCH_MODES:
        raise SearchError(f"search mode must be one of {', '.join(SEARCH_MODES)}; got {mode!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SearchError(f"k (hits to return) must be a positive integer, got {k!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise SearchError(f"offset must be a non-negative integer, got {offset!r}")
    if k + offset > MAX_RESULT_WINDOW:
        raise SearchError(f"offset + k must be at most {MAX_RESULT_WINDOW}, got {offset + k}")
    kind_tuple: tuple[str, ...] | None = None
    if kinds is not None:
        if isinstance(kinds, str):
            kinds = (kinds,)
        kind_tuple = tuple(kinds)
        unknown = [x for x in kind_tuple if x not in NODE_KINDS]
        if unknown or not kind_tuple:
            raise SearchError(f"kinds must be a non-empty subset of {', '.join(NODE_KINDS)}; got {kind_tuple!r}")
    if path_prefix is not None and not isinstance(path_prefix, str):
        raise SearchError(f"path_prefix must be a string, got {path_prefix!r}")
    return SearchFilters(kind_tuple, path_prefix or None)


@runtime_checkable
class SearchIndex(Protocol):
    """A search index over workspace nodes: derived state, rebuilt or followed from the trace.

    Writes are staged: `upsert` and `delete` become searchable only after
    `refresh()`. `refresh(embed=True)` first embeds every node upserted since
    the last embedding in one batch; with `embed=False` BM25 sees the new text
    at once while dense search keeps a node's previous vector (a new node has
    none yet and is absent from dense results). Deleted nodes never come back.
    """

    @property
    def name(self) -> str:
        """The index's name (the workspace namespace it serves)."""

    @property
    def pending_embeddings(self) -> int:
        """How many upserted nodes wait for the next embedding batch."""

    def upsert(self, nodes: Iterable[Node]) -> None:
        """Stage these nodes for indexing (an inactive node is staged as a delete)."""

    def delete(self, ids: Iterable[str]) -> None:
        """Stage removal of these ids (unknown ids are ignored)."""

    def refresh(self, embed: bool = True) -> None:
        """Apply staged writes so they are searchable; with `embed`, embed pending nodes first."""

    def search(self, query: str, k: int = 10, offset: int = 0, mode: SearchMode = "bm25",
               kinds: Sequence[str] | None = None, path_prefix: str | None = None) -> list[Hit]:
        """Hits `offset .. offset + k` for `query`, best first, restricted by the filters."""

    def count(self) -> int:
        """The number of searchable (refreshed) nodes."""

    def close(self) -> None:
        """Release resources (connections, writers)."""
