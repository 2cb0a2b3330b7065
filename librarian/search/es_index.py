"""The Elasticsearch backend: one index per workspace namespace, official 9.x client.

Mapping: `text` (BM25, `english` analyzer), `vector` (`dense_vector`,
cosine), keywords `id`, `kind`, `path`. Writes are staged locally and sent
by `refresh()` as one bulk request followed by an explicit index refresh;
nothing relies on a write being searchable earlier. Hybrid search uses
`retriever.rrf`.
"""

from __future__ import annotations

from collections.abc import Sequence

import elasticsearch
import numpy as np
from elasticsearch import helpers

from librarian.search.base import (
    RRF_RANK_CONSTANT,
    Hit,
    SearchFilters,
    SearchMode,
    SearchRecord,
    check_search_args,
    rrf_window,
)
from librarian.search.embedders import Embedder, check_embeddings, embed_batch
from librarian.search.errors import (
    BulkIndexError,
    BulkItemFailure,
    EmbedderMissingError,
    MappingMismatchError,
    SearchError,
)
from librarian.search.es_settings import ElasticsearchSettings, translated_errors
from librarian.search.fusion import reciprocal_rank_fusion
from librarian.search.staging import StagedWrites, WriteStage

SOURCE_FIELDS = ["id", "path", "kind", "text"]


def index_mapping(dim: int | None) -> dict:
    """The mapping the backend creates and expects (`dim=None`: no vector field)."""
    props: dict[str, dict] = {
        "id": {"type": "keyword"},
        "path": {"type": "keyword"},
        "kind": {"type": "keyword"},
        "text": {"type": "text", "analyzer": "english"},
    }
    if dim is not None:
        props["vector"] = {"type": "dense_vector", "dims": dim, "index": True, "similarity": "cosine",
                           "index_options": {"type": "hnsw"}}  # float vectors: exact cosine scores
    return {"dynamic": "strict", "properties": props}


def mapping_problems(actual: dict, dim: int | None) -> list[str]:
    """How an existing index's mapping differs from `index_mapping(dim)` (extra fields are allowed)."""
    props = actual.get("properties", {})
    problems = []
    for name, want in index_mapping(dim)["properties"].items():
        have = props.get(name)
        if have is None:
            problems.append(f"field {name!r} is missing")
            continue
        for key in ("type", "analyzer", "dims", "similarity"):
            if key in want and have.get(key, "standard" if key == "analyzer" else None) != want[key]:
                problems.append(f"field {name!r} has {key}={have.get(key)!r}, expected {want[key]!r}")
    return problems


def bulk_write(client: elasticsearch.Elasticsearch, index: str, actions: list[dict],
               settings: ElasticsearchSettings) -> int:
    """Send `actions` in chunks; returns how many succeeded. Raises `BulkIndexError` listing every failed item.

    Deleting an id that is not there is not a failure. Items rejected with
    HTTP 429 are retried with exponential backoff.
    """
    succeeded = 0
    failures: list[BulkItemFailure] = []
    with translated_errors(settings, index, "bulk write"):
        for ok, item in helpers.streaming_bulk(
            client, actions, chunk_size=settings.bulk_chunk_size, raise_on_error=False,
            raise_on_exception=True, max_retries=settings.max_retries,
            initial_backoff=max(settings.retry_backoff_s, 0.01), max_backoff=settings.retry_backoff_cap_s,
        ):
            op, info = next(iter(item.items()))
            if ok or (op == "delete" and info.get("status") == 404):
                succeeded += 1
                continue
            error = info.get("error") or {}
            if isinstance(error, str):
                error = {"type": "error", "reason": error}
            failures.append(BulkItemFailure(str(info.get("_id")), op, int(info.get("status", 0)),
                                            str(error.get("type", "unknown")), str(error.get("reason", error))))
    if failures:
        raise BulkIndexError(index, failures, succeeded)
    return succeeded


class ElasticsearchIndex(StagedWrites):
    """A `SearchIndex` stored in Elasticsearch (or any server speaking its API)."""

    def __init__(self, namespace: str = "default", embedder: Embedder | None = None,
                 settings: ElasticsearchSettings | None = None,
                 client: elasticsearch.Elasticsearch | None = None) -> None:
        self.settings = settings or ElasticsearchSettings.from_env()
        self.namespace = namespace
        self.index = self.settings.index_name(namespace)
        self.embedder = embedder
        self._own_client = client is None
        self.client = client or self.settings.client()
        self._vector_text: dict[str, str] = {}
        self._dirty_records: dict[str, SearchRecord] = {}
        self._stage = WriteStage(embedder is not None, self._vector_text.get)
        try:
            self._ensure_index()
        except BaseException:
            self.close()
            raise

    def _errors(self, action: str):
        return translated_errors(self.settings, self.index, action)

    def _ensure_index(self) -> None:
        dim = None if self.embedder is None else self.embedder.dim
        with self._errors("connect"):
            self.client.info()
        with self._errors("check or create the index"):
            if not self.client.indices.exists(index=self.index):
                try:
                    self.client.indices.create(
                        index=self.index, mappings=index_mapping(dim),
                        settings={"number_of_shards": self.settings.number_of_shards,
                                  "number_of_replicas": self.settings.number_of_replicas})
                    return
                except elasticsearch.BadRequestError as exc:
                    if exc.error != "resource_already_exists_exception":
                        raise
            found = self.client.indices.get_mapping(index=self.index)
        mapping = next(iter(found.body.values()))["mappings"]
        problems = mapping_problems(mapping, dim)
        if problems:
            raise MappingMismatchError(
                f"index {self.index!r} at {self.settings.safe_url} has a mapping this backend cannot use: "
                f"{'; '.join(problems)}. Delete the index (it is derived state and will be rebuilt), or use "
                f"another namespace or LIBRARIAN_ES_INDEX_PREFIX"
            )

    # ----- contract
    @property
    def name(self) -> str:
        return self.index

    def refresh(self, embed: bool = True) -> None:
        writes = self._stage.take_writes()
        for node_id, record in writes.items():
            if record is None:
                self._dirty_records.pop(node_id, None)
                self._vector_text.pop(node_id, None)
            elif node_id in self._stage.dirty:
                self._dirty_records[node_id] = record
        vectors = self._embed_dirty() if embed else {}
        actions = []
        for node_id, record in writes.items():
            if record is None:
                actions.append({"_op_type": "delete", "_index": self.index, "_id": node_id})
            elif node_id not in vectors:
                actions.append({"_op_type": "update", "_index": self.index, "_id": node_id,
                                "doc": _source(record), "doc_as_upsert": True})
        for node_id, (record, vector) in vectors.items():
            actions.append({"_op_type": "index", "_index": self.index, "_id": node_id,
                            "_source": _source(record, vector)})
        try:
            if actions:
                bulk_write(self.client, self.index, actions, self.settings)
        finally:
            with self._errors("refresh"):
                self.client.indices.refresh(index=self.index)
        for node_id, (record, vector) in vectors.items():
            if np.any(vector):
                self._vector_text[node_id] = record.text

    def _embed_dirty(self) -> dict[str, tuple[SearchRecord, np.ndarray]]:
        if self.embedder is None or not self._stage.dirty:
            return {}
        items = [(i, self._dirty_records[i]) for i in sorted(self._stage.dirty) if i in self._dirty_records]
        matrix = embed_batch(self.embedder, [r.text for _, r in items])
        self._stage.dirty.clear()
        self._dirty_records.clear()
        return {node_id: (record, matrix[i]) for i, (node_id, record) in enumerate(items)}

    def count(self) -> int:
        with self._errors("count"):
            return int(self.client.count(index=self.index)["count"])

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def drop(self) -> None:
        """Delete the whole index (it is derived state)."""
        with self._errors("delete the index"):
            self.client.indices.delete(index=self.index, ignore_unavailable=True)

    # ----- search
    def search(self, query: str, k: int = 10, offset: int = 0, mode: SearchMode = "bm25",
               kinds: Sequence[str] | None = None, path_prefix: str | None = None) -> list[Hit]:
        filters = check_search_args(query, k, offset, mode, kinds, path_prefix)
        filter_clauses = _filter_clauses(filters)
        text_query: dict = {"match": {"text": {"query": query}}}
        if filter_clauses:
            text_query = {"bool": {"must": text_query, "filter": filter_clauses}}
        if mode == "bm25":
            return self._run(f"bm25 search {query!r}", query=text_query, size=k, from_=offset)
        vector = self._query_vector(query)
        if mode == "dense":
            if vector is None:
                return []
            return self._run(f"dense search {query!r}", knn=self._knn(vector, k + offset, filter_clauses),
                             size=k, from_=offset)
        window = rrf_window(k, offset)
        if vector is None:  # no dense signal: fuse the lexical ranking alone, as the embedded backend does
            lexical = self._run(f"hybrid search {query!r}", query=text_query, size=window, from_=0)
            fused = reciprocal_rank_fusion([[h.id for h in lexical]], window=window)[offset: offset + k]
            by_id = {h.id: h for h in lexical}
            return [Hit(i, by_id[i].path, by_id[i].kind, s, by_id[i].text) for i, s in fused]
        retriever = {"rrf": {
            "retrievers": [{"standard": {"query": text_query}},
                           {"knn": self._knn(vector, window, filter_clauses)}],
            "rank_window_size": window,
            "rank_constant": RRF_RANK_CONSTANT,
        }}
        return self._run(f"hybrid search {query!r}", retriever=retriever, size=k, from_=offset)

    def _query_vector(self, query: str) -> list[float] | None:
        if self.embedder is None:
            raise EmbedderMissingError(f"index {self.index!r} has no embedder; dense and hybrid search need one")
        vector = check_embeddings(self.embedder.encode([query]), 1, self.embedder.dim, self.embedder.name)[0]
        return vector.tolist() if np.any(vector) else None

    @staticmethod
    def _knn(vector: list[float], k: int, filter_clauses: list[dict]) -> dict:
        knn = {"field": "vector", "query_vector": vector, "k": k, "num_candidates": min(10_000, max(100, 2 * k))}
        if filter_clauses:
            knn["filter"] = filter_clauses
        return knn

    def _run(self, action: str, **body) -> list[Hit]:
        with self._errors(action):
            try:
                response = self.client.search(index=self.index, source_includes=SOURCE_FIELDS,
                                              track_total_hits=False, **body)
            except elasticsearch.NotFoundError as exc:
                raise SearchError(f"index {self.index!r} does not exist at {self.settings.safe_url}; "
                                  "it was deleted after this backend opened it") from exc
        return [Hit(h["_id"], h["_source"]["path"], h["_source"]["kind"], float(h["_score"]), h["_source"]["text"])
                for h in response["hits"]["hits"]]


def _source(record: SearchRecord, vector: np.ndarray | None = None) -> dict:
    source: dict = {"id": record.id, "path": record.path, "kind": record.kind, "text": record.text}
    if vector is not None and np.any(vector):
        source["vector"] = [float(x) for x in vector]
    return source


def _filter_clauses(filters: SearchFilters) -> list[dict]:
    clauses: list[dict] = []
    if filters.kinds is not None:
        clauses.append({"terms": {"kind": list(filters.kinds)}})
    if filters.path_prefix:
        clauses.append({"prefix": {"path": filters.path_prefix}})
    return clauses
