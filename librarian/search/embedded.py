"""The embedded backend: BM25 (tantivy) + dense vectors (numpy) + reciprocal rank fusion, in process."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from librarian.search.base import Hit, SearchFilters, SearchMode, SearchRecord, check_search_args, rrf_window
from librarian.search.embedders import Embedder, check_embeddings, embed_batch
from librarian.search.errors import EmbedderMissingError, IndexFormatError, SearchError
from librarian.search.fusion import reciprocal_rank_fusion
from librarian.search.staging import StagedWrites, WriteStage
from librarian.search.tantivy_bm25 import TantivyBM25
from librarian.search.vectors import VectorStore

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
RECORDS = "records.parquet"
VECTORS = "vectors.npy"
QUERY_CACHE = 4096  # query embeddings kept per index


class EmbeddedIndex(StagedWrites):
    """A `SearchIndex` living in this process. `embedder=None` gives a BM25-only index."""

    def __init__(self, name: str = "default", embedder: Embedder | None = None) -> None:
        self._name = name
        self.embedder = embedder
        self._bm25 = TantivyBM25()
        self._records: dict[int, SearchRecord] = {}
        self._slot_of: dict[str, int] = {}
        self._next_slot = 0
        self._vectors = VectorStore(embedder.dim) if embedder is not None else None
        self._vector_text: dict[str, str] = {}
        self._stage = WriteStage(embedder is not None, self._vector_text.get)
        self._query_vectors: OrderedDict[str, np.ndarray] = OrderedDict()  # recent query embeddings (LRU)

    # ----- contract
    @property
    def name(self) -> str:
        return self._name

    def refresh(self, embed: bool = True) -> None:
        vectors = self._embed_dirty() if embed else {}
        writes = self._stage.take_writes()
        for node_id, record in writes.items():
            old = self._slot_of.pop(node_id, None)
            if old is not None:
                self._bm25.remove(old)
                del self._records[old]
            if record is None:
                if self._vectors is not None:
                    self._vectors.remove([node_id])
                self._vector_text.pop(node_id, None)
                continue
            slot, self._next_slot = self._next_slot, self._next_slot + 1
            self._bm25.add(slot, record.kind, record.path, record.text)
            self._records[slot] = record
            self._slot_of[node_id] = slot
            if self._vectors is not None:
                self._vectors.relabel(node_id, record.kind, record.path)
        for node_id, (text, vector) in vectors.items():
            self._store_vector(node_id, text, vector)
        if writes:
            self._bm25.commit()

    def _embed_dirty(self) -> dict[str, tuple[str, np.ndarray]]:
        """Embed every dirty node's latest text in one batch."""
        if self.embedder is None or not self._stage.dirty:
            return {}
        items: list[tuple[str, str]] = []
        for node_id in sorted(self._stage.dirty):
            record = self._stage.writes.get(node_id) or self._record(node_id)
            if record is not None:
                items.append((node_id, record.text))
        matrix = embed_batch(self.embedder, [t for _, t in items])
        self._stage.dirty.clear()
        return {node_id: (text, matrix[i]) for i, (node_id, text) in enumerate(items)}

    def _store_vector(self, node_id: str, text: str, vector: np.ndarray) -> None:
        record = self._record(node_id)
        if record is None or self._vectors is None:
            return
        self._vectors.put(node_id, record.kind, record.path, vector)
        self._vector_text[node_id] = text

    def _record(self, node_id: str) -> SearchRecord | None:
        slot = self._slot_of.get(node_id)
        return None if slot is None else self._records[slot]

    def count(self) -> int:
        return len(self._slot_of)

    def close(self) -> None:
        """Nothing to release (the tantivy index lives in memory)."""

    def ids(self) -> list[str]:
        """The ids of the searchable (refreshed) nodes."""
        return list(self._slot_of)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._slot_of

    # ----- search
    def search(self, query: str, k: int = 10, offset: int = 0, mode: SearchMode = "bm25",
               kinds: Sequence[str] | None = None, path_prefix: str | None = None) -> list[Hit]:
        filters = check_search_args(query, k, offset, mode, kinds, path_prefix)
        if mode == "bm25":
            return [self._hit_at(slot, score) for slot, score in self._bm25.search(query, k, offset, filters)]
        if mode == "dense":
            ranked = self._dense(query, k + offset, filters)[offset:]
            return [self._hit(node_id, score) for node_id, score in ranked]
        window = rrf_window(k, offset)
        lexical = [self._records[slot].id for slot, _ in self._bm25.search(query, window, 0, filters)]
        dense = [node_id for node_id, _ in self._dense(query, window, filters)]
        fused = reciprocal_rank_fusion([lexical, dense], window=window)[offset: offset + k]
        return [self._hit(node_id, score) for node_id, score in fused]

    def _dense(self, query: str, n: int, filters: SearchFilters) -> list[tuple[str, float]]:
        if self.embedder is None or self._vectors is None:
            raise EmbedderMissingError(f"index {self._name!r} has no embedder; dense and hybrid search need one "
                                       "(create it with embedder='minilm' or 'hashing')")
        vector = self._query_vector(query)
        return self._vectors.top(vector, n, filters) if np.any(vector) else []

    def clear_query_cache(self) -> None:
        """Forget cached query embeddings (for timing runs that must start cold)."""
        self._query_vectors.clear()

    def _query_vector(self, query: str) -> np.ndarray:
        """The query's embedding; agents repeat queries (next pages, the same names), so recent ones are kept."""
        vector = self._query_vectors.get(query)
        if vector is None:
            assert self.embedder is not None
            vector = check_embeddings(self.embedder.encode([query]), 1, self.embedder.dim, self.embedder.name)[0]
            self._query_vectors[query] = vector
            if len(self._query_vectors) > QUERY_CACHE:
                self._query_vectors.popitem(last=False)
        else:
            self._query_vectors.move_to_end(query)
        return vector

    def _hit_at(self, slot: int, score: float) -> Hit:
        r = self._records[slot]
        return Hit(r.id, r.path, r.kind, score, r.text)

    def _hit(self, node_id: str, score: float) -> Hit:
        return self._hit_at(self._slot_of[node_id], score)

    # ----- persistence
    def save(self, folder: str | os.PathLike[str], extra: dict | None = None) -> Path:
        """Write the refreshed state to `folder` (records, vectors, manifest last). Staged writes must be refreshed first."""
        if self._stage.writes:
            raise SearchError(f"index {self._name!r} has {len(self._stage.writes)} staged write(s); "
                              "call refresh() before save()")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        records = sorted(self._records.items())
        vector_ids, matrix = (self._vectors.export() if self._vectors is not None
                              else ([], np.zeros((0, 0), dtype=np.float32)))
        row_of = {node_id: row for row, node_id in enumerate(vector_ids)}
        table = pa.table({
            "id": [r.id for _, r in records],
            "path": [r.path for _, r in records],
            "kind": [r.kind for _, r in records],
            "text": [r.text for _, r in records],
            "vector_row": pa.array([row_of.get(r.id, -1) for _, r in records], type=pa.int32()),
            "vector_text": [self._vector_text.get(r.id) for _, r in records],
        })
        _atomic(folder / RECORDS, lambda p: pq.write_table(table, p))
        _atomic(folder / VECTORS, lambda p: _save_npy(p, matrix))
        manifest = {
            "format": FORMAT_VERSION,
            "name": self._name,
            "embedder": None if self.embedder is None else {"name": self.embedder.name, "dim": self.embedder.dim},
            "count": len(records),
            "dirty": sorted(self._stage.dirty),
            "extra": extra or {},
        }
        _atomic(folder / MANIFEST, lambda p: Path(p).write_text(json.dumps(manifest, indent=1)))
        return folder

    @classmethod
    def load(cls, folder: str | os.PathLike[str], embedder: Embedder | None = None) -> EmbeddedIndex:
        """Rebuild an index saved by `save` (BM25 postings are rebuilt; vectors are read back)."""
        manifest = read_manifest(folder)
        folder = Path(folder)
        saved = manifest["embedder"]
        if embedder is not None and saved is not None and (saved["name"], saved["dim"]) != (embedder.name, embedder.dim):
            raise IndexFormatError(f"index in {folder} was embedded with {saved['name']} ({saved['dim']} dims), "
                                   f"not {embedder.name} ({embedder.dim} dims); load it with the same embedder "
                                   "or rebuild it")
        try:
            table = pq.read_table(folder / RECORDS).to_pylist()
            matrix = np.load(folder / VECTORS, allow_pickle=False)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise IndexFormatError(f"cannot read the index files in {folder}: {exc}") from exc
        index = cls(manifest["name"], embedder)
        for row in table:
            record = SearchRecord(row["id"], row["path"], row["kind"], row["text"])
            slot, index._next_slot = index._next_slot, index._next_slot + 1
            index._bm25.add(slot, record.kind, record.path, record.text)
            index._records[slot] = record
            index._slot_of[record.id] = slot
            if embedder is not None and saved is not None and row["vector_row"] >= 0:
                index._store_vector(record.id, row["vector_text"], matrix[row["vector_row"]])
        if embedder is not None:
            index._stage.dirty.update(manifest["dirty"] if saved is not None else index._slot_of)
        index._bm25.commit()
        return index


def read_manifest(folder: str | os.PathLike[str]) -> dict:
    """The manifest of a saved index; raises `IndexFormatError` if absent, corrupt or of another format."""
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise IndexFormatError(f"no saved search index in {folder} ({MANIFEST} is missing)") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"cannot read {path}: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        raise IndexFormatError(f"{path} has format {manifest.get('format') if isinstance(manifest, dict) else '?'}; "
                               f"this version reads format {FORMAT_VERSION}")
    return manifest


def _save_npy(path: str, matrix: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, matrix, allow_pickle=False)


def _atomic(target: Path, write) -> None:
    tmp = target.with_name(target.name + ".tmp")
    write(str(tmp))
    os.replace(tmp, target)
