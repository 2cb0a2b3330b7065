"""The HTTP API: ordinary requests, read-only by default, write mode, path safety, and schemathesis on its schema."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from librarian.app.serve import make_asker
from librarian.app.serve_http import HttpGuard, make_app
from librarian.app.service import SERVE_TRACE, WorkspaceService
from librarian.app.workspace_dir import open_workspace
from librarian.workspace import codec


@pytest.fixture(scope="module")
def api(built200: Path) -> TestClient:
    service = WorkspaceService(open_workspace(built200))
    return TestClient(make_app(service, make_asker(service, "kbgym", None, {})), base_url="http://127.0.0.1:8765")


def test_tools_and_views(api: TestClient) -> None:
    names = [t["name"] for t in api.get("/tools").json()]
    assert names == ["ls", "read", "open", "search"]
    top = api.get("/ls", params={"path": ""}).json()
    assert top["text"].startswith("ls /: 2 entries")
    opened = api.get("/open", params={"path": "indexes/city"}).json()
    assert opened["text"].startswith("README of indexes/city:\nOne index document per city")
    read = api.get("/read", params={"path": "indexes/job/arborist"})
    assert read.status_code == 200 and all(c[-1].startswith("facts/") for c in read.json()["provenance_paths"])
    page = api.get("/search", params={"query": "Port Avel"}).json()
    assert page["hits"][0]["path"] == "indexes/city/port-avel" and page["has_more"]


def test_paths_never_leave_the_workspace(api: TestClient) -> None:
    for path in ("../secret", "/etc/passwd", "a/../../b", "indexes/\x00"):
        res = api.get("/ls", params={"path": path})
        assert res.status_code == 404, path
        assert res.json()["detail"]
    res = api.get("/read", params={"path": "../../etc/passwd"})
    assert res.status_code == 404 and "no file at" in res.json()["detail"]


def test_ask_answers_with_provenance(api: TestClient) -> None:
    res = api.post("/ask", json={"question": "Which city does Emil Bellweather's father live in?"})
    assert res.status_code == 200
    body = res.json()
    assert body["answer"] == "Harrowgate Vale" and body["actions"] >= 1
    assert api.post("/ask", json={"question": ""}).status_code == 422


def test_read_only_unless_write_mode(api: TestClient, built200: Path, tmp_path: Path) -> None:
    assert api.post("/apply", json={"op": {"op": "add", "text": "x"}}).status_code == 403
    copy = tmp_path / "ws"
    shutil.copytree(built200, copy, ignore=shutil.ignore_patterns("export", "view"))
    service = WorkspaceService(open_workspace(copy, writable=True), write=True)
    client = TestClient(make_app(service), base_url="http://localhost:8765")
    assert "apply" in [t["name"] for t in client.get("/tools").json()]
    bad = client.post("/apply", json={"op": {"op": "add", "text": "escape", "path": "../outside"}})
    assert bad.status_code == 400 and ".." in bad.json()["detail"]
    good = client.post("/apply", json={"op": {"op": "add", "text": "Notes on Port Avel", "path": "notes/port-avel",
                                              "links": ["indexes/city/port-avel"]}})
    assert good.status_code == 200 and good.json()["created"]
    nodes, _ = codec.read_parquet(copy / "snapshot.parquet")
    assert any(n.path == "notes/port-avel" for n in nodes) and (copy / SERVE_TRACE).is_file()
    assert client.get("/search", params={"query": "Notes on Port Avel"}).json()["hits"][0]["path"] == "notes/port-avel"
    assert not (tmp_path / "outside").exists()


def test_api_conforms_to_its_openapi_schema(built200: Path) -> None:
    """Schemathesis generates requests for every operation; each response must match the schema."""
    service = WorkspaceService(open_workspace(built200))
    app = make_app(service, make_asker(service, "kbgym", None, {}), guard=HttpGuard(allowed_hosts=None))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {"GET /ls", "GET /read", "GET /open", "GET /search", "POST /ask"}
    for operation in operations:

        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=operation.as_strategy())
        def check(case) -> None:
            case.call_and_validate()

        check()
