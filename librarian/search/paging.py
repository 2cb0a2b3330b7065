"""Result pages for the reader's `search(query, page)` tool: five hits a page, one action a page (paper 001 §IV-B)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from librarian.search.base import Hit, SearchIndex, SearchMode
from librarian.search.errors import SearchError

PAGE_SIZE = 5
ACTIONS_PER_PAGE = 1


@dataclass(frozen=True, slots=True)
class Page:
    """Page `number` (from 1) of a query's results; `has_more` says whether page `number + 1` has hits."""

    query: str
    number: int
    hits: tuple[Hit, ...]
    has_more: bool
    actions: int = ACTIONS_PER_PAGE


def search_page(index: SearchIndex, query: str, page: int = 1, mode: SearchMode = "bm25",
                kinds: Sequence[str] | None = None, path_prefix: str | None = None,
                page_size: int = PAGE_SIZE) -> Page:
    """Hits `(page - 1) * page_size .. page * page_size` of `query`; costs one action whatever it returns."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise SearchError(f"page must be an integer >= 1 (the first page is 1), got {page!r}")
    if page_size < 1:
        raise SearchError(f"page_size must be >= 1, got {page_size}")
    # one extra hit tells whether a next page exists
    hits = index.search(query, k=page_size + 1, offset=(page - 1) * page_size, mode=mode,
                        kinds=kinds, path_prefix=path_prefix)
    return Page(query, page, tuple(hits[:page_size]), len(hits) > page_size)
