"""Elasticsearch backend specifics: settings, explicit refresh, and the documented errors."""

from __future__ import annotations

import http.server
import threading
import uuid

import elasticsearch
import pytest

from librarian.search import (
    BackendAuthError,
    BackendConnectionError,
    BulkIndexError,
    HashingEmbedder,
    MappingMismatchError,
    SearchError,
)
from librarian.search.emulator import free_port
from librarian.search.es_index import ElasticsearchIndex, bulk_write, index_mapping, mapping_problems
from librarian.search.es_settings import ElasticsearchSettings
from librarian.workspace import Node

pytestmark = pytest.mark.elasticsearch


def test_settings_from_environment():
    env = {"LIBRARIAN_ES_URL": "https://es.example:9200", "LIBRARIAN_ES_API_KEY": "k3y",
           "LIBRARIAN_ES_TIMEOUT": "2.5", "LIBRARIAN_ES_MAX_RETRIES": "5", "LIBRARIAN_ES_VERIFY_CERTS": "false",
           "LIBRARIAN_ES_INDEX_PREFIX": "team-"}
    s = ElasticsearchSettings.from_env(env)
    assert (s.url, s.api_key, s.request_timeout, s.max_retries, s.verify_certs) == (
        "https://es.example:9200", "k3y", 2.5, 5, False)
    assert s.index_name("ws1") == "team-ws1"
    assert "k3y" not in repr(s)
    assert ElasticsearchSettings.from_env(env, max_retries=0).max_retries == 0


@pytest.mark.parametrize("env, message", [
    ({"LIBRARIAN_ES_TIMEOUT": "soon"}, "LIBRARIAN_ES_TIMEOUT"),
    ({"LIBRARIAN_ES_URL": "es:9200"}, "LIBRARIAN_ES_URL"),
    ({"LIBRARIAN_ES_API_KEY": "k", "LIBRARIAN_ES_USERNAME": "u", "LIBRARIAN_ES_PASSWORD": "p"}, "not both"),
    ({"LIBRARIAN_ES_USERNAME": "u"}, "LIBRARIAN_ES_PASSWORD"),
    ({"LIBRARIAN_ES_CA_CERTS": "/nonexistent/ca.pem"}, "LIBRARIAN_ES_CA_CERTS"),
])
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(SearchError, match=message):
        ElasticsearchSettings.from_env(env)


def test_bad_namespace_is_rejected():
    with pytest.raises(SearchError, match="namespace 'My Workspace'"):
        ElasticsearchSettings().index_name("My Workspace")


def test_unreachable_server_names_url_and_setting():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = ElasticsearchSettings(url=url, request_timeout=1.0, max_retries=1, retry_backoff_s=0.01)
    with pytest.raises(BackendConnectionError, match="LIBRARIAN_ES_URL") as info:
        ElasticsearchIndex("ws", None, settings)
    assert url in str(info.value) and "librarian-ws" in str(info.value)


class _RefusingHandler(http.server.BaseHTTPRequestHandler):
    """A loopback server that answers like a secured cluster given wrong credentials."""

    def _refuse(self) -> None:
        body = (b'{"error":{"type":"security_exception","reason":"unable to authenticate user"},'
                b'"status":401}')
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("WWW-Authenticate", 'Basic realm="security"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = do_POST = _refuse

    def log_message(self, *args) -> None:
        pass


def test_bad_credentials_name_the_credential_settings():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings = ElasticsearchSettings(url=f"http://127.0.0.1:{server.server_port}", username="elastic",
                                         password="wrong", max_retries=0)
        with pytest.raises(BackendAuthError, match="LIBRARIAN_ES_USERNAME") as info:
            ElasticsearchIndex("ws", None, settings)
        assert "401" in str(info.value) and "librarian-ws" in str(info.value)
    finally:
        server.shutdown()
        server.server_close()


def test_wrong_mapping_names_index_field_and_fix(es_settings):
    name = f"t-{uuid.uuid4().hex[:10]}"
    index_name = es_settings.index_name(name)
    client = es_settings.client()
    client.indices.create(index=index_name, mappings={"properties": {
        "id": {"type": "keyword"}, "path": {"type": "keyword"}, "kind": {"type": "keyword"},
        "text": {"type": "keyword"},
        "vector": {"type": "dense_vector", "dims": 8, "index": True, "similarity": "cosine"}}})
    try:
        with pytest.raises(MappingMismatchError) as info:
            ElasticsearchIndex(name, HashingEmbedder(16), es_settings)
        message = str(info.value)
        assert index_name in message
        assert "field 'text' has type='keyword'" in message and "field 'vector' has dims=8" in message
        assert "LIBRARIAN_ES_INDEX_PREFIX" in message
    finally:
        client.indices.delete(index=index_name)
        client.close()


def test_mapping_problems_accepts_its_own_mapping():
    assert mapping_problems(index_mapping(32), 32) == []
    assert mapping_problems(index_mapping(None), None) == []
    assert mapping_problems(index_mapping(None), 32) == ["field 'vector' is missing"]


def test_bulk_partial_failure_lists_each_failed_item(es_index_factory):
    index = es_index_factory(HashingEmbedder(4))
    good = {"_op_type": "index", "_index": index.index, "_id": "good",
            "_source": {"id": "good", "path": "a.md", "kind": "raw", "text": "fine"}}
    wrong_dims = {"_op_type": "index", "_index": index.index, "_id": "bad-dims",
                  "_source": {"id": "bad-dims", "path": "b.md", "kind": "raw", "text": "x", "vector": [1.0, 0.0]}}
    unknown_field = {"_op_type": "index", "_index": index.index, "_id": "bad-field",
                     "_source": {"id": "bad-field", "path": "c.md", "kind": "raw", "text": "x", "colour": "red"}}
    missing = {"_op_type": "delete", "_index": index.index, "_id": "never-there"}
    with pytest.raises(BulkIndexError) as info:
        bulk_write(index.client, index.index, [good, wrong_dims, unknown_field, missing], index.settings)
    error = info.value
    assert sorted(f.id for f in error.failures) == ["bad-dims", "bad-field"]
    assert error.succeeded == 2  # the good document and the no-op delete
    assert all(f.status == 400 and f.op == "index" for f in error.failures)
    assert index.index in str(error) and "bad-dims" in str(error)
    index.refresh()
    assert index.count() == 1


def test_refresh_sends_writes_then_calls_the_refresh_api(es_index_factory, es_settings):
    index = es_index_factory(HashingEmbedder(8))
    calls: list[str] = []
    real_refresh = index.client.indices.refresh

    def recording_refresh(**kwargs):
        calls.append(kwargs["index"])
        return real_refresh(**kwargs)

    index.client.indices.refresh = recording_refresh
    index.upsert([Node(id="a", path="a.md", kind="raw", text="staged text")])
    observer = es_settings.client()
    try:
        observer.indices.refresh(index=index.index)
        assert observer.count(index=index.index)["count"] == 0  # upsert alone sends nothing
        index.refresh()
        assert calls == [index.index]
        assert observer.count(index=index.index)["count"] == 1
    finally:
        observer.close()


def test_search_after_index_was_dropped_names_the_index(es_index_factory):
    index = es_index_factory()
    index.drop()
    with pytest.raises(SearchError, match=index.index):
        index.search("anything")


def test_client_is_the_official_9x():
    assert elasticsearch.__versionstr__.startswith("9.")
