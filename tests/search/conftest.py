"""Fixtures for the search tests: an Elasticsearch-API server on loopback, and both backends.

If `LIBRARIAN_ES_URL` is set, the tests use that server (a real
Elasticsearch cluster, say) and start nothing. Otherwise a session fixture
starts the `noida-db` binary (an Elasticsearch-8-API emulator installed by
the `[test]` extra) on a free loopback port with a temporary data folder,
waits until it answers, and stops it by PID at the end.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from librarian.search import EmbeddedIndex, HashingEmbedder
from librarian.search.emulator import start_emulator
from librarian.search.es_index import ElasticsearchIndex
from librarian.search.es_settings import ElasticsearchSettings


@pytest.fixture(scope="session")
def es_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of an Elasticsearch-API server for this test session."""
    configured = os.environ.get("LIBRARIAN_ES_URL")
    if configured:
        yield configured
        return
    emulator = start_emulator(tmp_path_factory.mktemp("noida-data"))
    try:
        yield emulator.url
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def es_settings(es_url: str) -> ElasticsearchSettings:
    """Settings from the environment (credentials, CA) pointed at the session's server, failing fast."""
    return ElasticsearchSettings.from_env(url=es_url, request_timeout=10.0, max_retries=1,
                                          index_prefix="librarian-test-")


@pytest.fixture
def es_index_factory(es_settings: ElasticsearchSettings) -> Iterator[Callable[..., ElasticsearchIndex]]:
    """Makes Elasticsearch indexes in fresh namespaces and drops them after the test."""
    made: list[ElasticsearchIndex] = []

    def make(embedder=None, namespace: str | None = None) -> ElasticsearchIndex:
        index = ElasticsearchIndex(namespace or f"t-{uuid.uuid4().hex[:12]}", embedder, es_settings)
        made.append(index)
        return index

    yield make
    for index in made:
        index.drop()
        index.close()


@pytest.fixture(params=["embedded", pytest.param("elasticsearch", marks=pytest.mark.elasticsearch)])
def make_backend(request: pytest.FixtureRequest) -> Callable[..., object]:
    """Makes an index of the parametrised backend; `embedder` defaults to a 32-dim hashing embedder."""
    if request.param == "embedded":
        return lambda embedder=HashingEmbedder(32): EmbeddedIndex(f"t-{uuid.uuid4().hex[:8]}", embedder)
    factory = request.getfixturevalue("es_index_factory")
    return lambda embedder=HashingEmbedder(32): factory(embedder)
