"""BM25 over tantivy with terms analysed by `analysis.analyze` (Elasticsearch's `english` analyzer).

Each stored version of a node gets a fresh integer `slot`; the caller keeps
slot -> record. Text is analysed in Python and handed to tantivy as
space-separated terms, so tantivy only counts and scores (BM25, k1 = 1.2,
b = 0.75, as Lucene).
"""

from __future__ import annotations

from collections.abc import Sequence

import tantivy

from librarian.search.analysis import analyze
from librarian.search.base import SearchFilters

_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


def regex_escape(text: str) -> str:
    """Escape `text` for tantivy's (Rust) regular expressions."""
    return "".join("\\" + ch if ch in _REGEX_META else ch for ch in text)


class TantivyBM25:
    """An in-memory tantivy index of (slot, kind, path, analysed body)."""

    def __init__(self, heap_size: int = 64_000_000) -> None:
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("slot", indexed=True, fast=True)
        builder.add_text_field("kind", tokenizer_name="raw")
        builder.add_text_field("path", tokenizer_name="raw")
        builder.add_text_field("body", tokenizer_name="terms", index_option="freq")
        self.schema = builder.build()
        self.index = tantivy.Index(self.schema)
        self.index.register_tokenizer("terms", tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
        self.index.config_reader(reload_policy="manual")
        self.writer = self.index.writer(heap_size=heap_size, num_threads=1)
        self.searcher = self.index.searcher()

    def add(self, slot: int, kind: str, path: str, text: str) -> None:
        doc = tantivy.Document()
        doc.add_integer("slot", slot)
        doc.add_text("kind", kind)
        doc.add_text("path", path)
        doc.add_text("body", " ".join(analyze(text)))
        self.writer.add_document(doc)

    def remove(self, slot: int) -> None:
        self.writer.delete_documents_by_term("slot", slot)

    def commit(self) -> None:
        """Make added and removed documents searchable."""
        self.writer.commit()
        self.index.reload()
        self.searcher = self.index.searcher()

    def _filter(self, filters: SearchFilters) -> tantivy.Query | None:
        clauses: list[tantivy.Query] = []
        if filters.kinds is not None:
            kinds = [tantivy.Query.term_query(self.schema, "kind", k) for k in filters.kinds]
            clauses.append(kinds[0] if len(kinds) == 1 else
                           tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in kinds]))
        if filters.path_prefix:
            clauses.append(tantivy.Query.regex_query(self.schema, "path",
                                                     "(?s)" + regex_escape(filters.path_prefix) + ".*"))
        if not clauses:
            return None
        combined = clauses[0] if len(clauses) == 1 else tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, q) for q in clauses])
        return tantivy.Query.const_score_query(combined, 0.0)

    def query(self, terms: Sequence[str], filters: SearchFilters) -> tantivy.Query | None:
        """An OR of the terms (duplicates count twice, as in Elasticsearch's `match`), then the filters."""
        if not terms:
            return None
        terms_q = [tantivy.Query.term_query(self.schema, "body", t, index_option="freq") for t in terms]
        query = terms_q[0] if len(terms_q) == 1 else tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, q) for q in terms_q])
        filt = self._filter(filters)
        if filt is not None:
            query = tantivy.Query.boolean_query([(tantivy.Occur.Must, query), (tantivy.Occur.Must, filt)])
        return query

    def search(self, text: str, limit: int, offset: int = 0,
               filters: SearchFilters = SearchFilters()) -> list[tuple[int, float]]:
        """(slot, score) of the best `limit` documents after `offset`, best first."""
        query = self.query(analyze(text), filters)
        if query is None:
            return []
        hits = self.searcher.search(query, limit=limit, offset=offset, count=False).hits
        if not hits:
            return []
        slots = self.searcher.fast_field_values("slot", [addr for _, addr in hits])
        return [(int(slot), float(score)) for (score, _), slot in zip(hits, slots, strict=True)]

    @property
    def num_docs(self) -> int:
        return self.searcher.num_docs
