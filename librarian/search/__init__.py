"""Search over a workspace: the `SearchIndex` contract and its backends.

`embedded` (default): tantivy BM25 + all-MiniLM-L6-v2 vectors + reciprocal
rank fusion, in process, persisted beside a snapshot. `elasticsearch`: the
official 9.x client, one index per workspace namespace. `IndexSync` follows a
workspace's trace; `search_page` serves the reader's five-hit pages.
"""

from librarian.search.base import SEARCH_MODES, Hit, SearchFilters, SearchIndex, SearchMode
from librarian.search.embedded import EmbeddedIndex
from librarian.search.embedders import Embedder, HashingEmbedder, MiniLMEmbedder, make_embedder
from librarian.search.errors import (
    BackendAuthError,
    BackendConnectionError,
    BulkIndexError,
    BulkItemFailure,
    EmbedderMissingError,
    IndexFormatError,
    MappingMismatchError,
    SearchError,
)
from librarian.search.factory import BACKENDS, SearchConfig, make_index
from librarian.search.fusion import reciprocal_rank_fusion
from librarian.search.paging import PAGE_SIZE, Page, search_page
from librarian.search.sync import IndexSync

__all__ = [
    "BACKENDS", "PAGE_SIZE", "SEARCH_MODES", "BackendAuthError", "BackendConnectionError", "BulkIndexError",
    "BulkItemFailure", "EmbeddedIndex", "Embedder", "EmbedderMissingError", "HashingEmbedder", "Hit",
    "IndexFormatError", "IndexSync", "MappingMismatchError", "MiniLMEmbedder", "Page", "SearchConfig",
    "SearchError", "SearchFilters", "SearchIndex", "SearchMode", "make_embedder", "make_index",
    "reciprocal_rank_fusion", "search_page",
]
