"""The error types of the search layer.

Every message names what was wrong and what to change: the index, and for
connection problems the setting (an environment variable) to fix.
"""

from __future__ import annotations

from dataclasses import dataclass


class SearchError(ValueError):
    """A search request or index operation was invalid or failed."""


class EmbedderMissingError(SearchError):
    """Dense or hybrid search was asked of an index built without an embedder."""


class IndexFormatError(SearchError):
    """A persisted index folder is missing, corrupt, or was built with another embedder."""


class BackendConnectionError(SearchError):
    """The search server could not be reached (URL, TLS or timeout)."""


class BackendAuthError(SearchError):
    """The search server refused the credentials (HTTP 401) or the privileges (HTTP 403)."""


class MappingMismatchError(SearchError):
    """An existing index's mapping does not match what the backend needs."""


@dataclass(frozen=True, slots=True)
class BulkItemFailure:
    """One rejected item of a bulk request."""

    id: str
    op: str
    status: int
    error_type: str
    reason: str


class BulkIndexError(SearchError):
    """Some items of a bulk request failed; the others were written.

    `failures` lists every rejected item; nothing is swallowed.
    """

    def __init__(self, index: str, failures: list[BulkItemFailure], succeeded: int) -> None:
        self.index = index
        self.failures = failures
        self.succeeded = succeeded
        shown = "; ".join(f"{f.op} {f.id!r}: HTTP {f.status} {f.error_type}: {f.reason}" for f in failures[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(
            f"bulk write to index {index!r}: {len(failures)} item(s) failed, {succeeded} succeeded: {shown}{more}"
        )
