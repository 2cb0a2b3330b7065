"""Pick a backend by name, as a config does: `embedded` (default) or `elasticsearch`."""

from __future__ import annotations

from dataclasses import dataclass, field

from librarian.search.base import SearchIndex
from librarian.search.embedded import EmbeddedIndex
from librarian.search.embedders import Embedder, make_embedder
from librarian.search.es_index import ElasticsearchIndex
from librarian.search.es_settings import ElasticsearchSettings

BACKENDS: tuple[str, ...] = ("embedded", "elasticsearch")


@dataclass
class SearchConfig:
    """Search settings of a pipeline config. `embedder`: 'minilm', 'hashing' or 'none'."""

    backend: str = "embedded"
    namespace: str = "default"
    embedder: str = "minilm"
    hashing_dim: int = 64
    elasticsearch: dict = field(default_factory=dict)  # overrides of ElasticsearchSettings fields


def make_index(config: SearchConfig | None = None, embedder: Embedder | None = None) -> SearchIndex:
    """A new index for `config` (`embedder` overrides the one the config names)."""
    config = config or SearchConfig()
    if embedder is None:
        embedder = make_embedder(config.embedder, config.hashing_dim)
    if config.backend == "embedded":
        return EmbeddedIndex(config.namespace, embedder)
    if config.backend == "elasticsearch":
        settings = ElasticsearchSettings.from_env(**config.elasticsearch)
        return ElasticsearchIndex(config.namespace, embedder, settings)
    raise ValueError(f"unknown search backend {config.backend!r}; use one of {', '.join(BACKENDS)}")
