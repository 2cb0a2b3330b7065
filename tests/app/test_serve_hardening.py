"""`librarian serve` under abuse: body limits before parsing, short error echoes, the Host allow-list, bearer
tokens, atomic /apply, bad text over HTTP, and a manifest that points outside the build folder."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from librarian.app.serve import main as serve_main
from librarian.app.serve_http import HttpGuard, make_app
from librarian.app.service import SERVE_TRACE, WorkspaceService
from librarian.app.workspace_dir import open_workspace
from librarian.workspace import WorkspaceError, codec, read_trace

LOCAL = "http://127.0.0.1:8765"


@pytest.fixture()
def writable(built200: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ws"
    shutil.copytree(built200, copy, ignore=shutil.ignore_patterns("export", "view"))
    return copy


def _client(folder: Path, write: bool = False, guard: HttpGuard | None = None, base_url: str = LOCAL) -> TestClient:
    service = WorkspaceService(open_workspace(folder, writable=write), write=write)
    return TestClient(make_app(service, guard=guard), base_url=base_url)


# ----- body size ------------------------------------------------------------------------------------------------

def test_oversized_bodies_are_refused_before_parsing(built200: Path) -> None:
    client = _client(built200)
    big = json.dumps({"op": {"op": "add", "text": "x" * (3 * 1024 * 1024)}})
    res = client.post("/apply", content=big, headers={"content-type": "application/json"})
    assert res.status_code == 413 and "larger than 2097152 bytes" in res.json()["detail"]

    def chunks():  # no Content-Length: the limit is counted as the body streams in
        yield b'{"op": {"op": "add", "text": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}}'

    res = client.post("/apply", content=chunks(), headers={"content-type": "application/json"})
    assert res.status_code == 413
    small = _client(built200, guard=HttpGuard(max_body_bytes=64))
    assert small.post("/ask", json={"question": "Which city does Emil Bellweather's father live in?"}).status_code == 413
    assert small.get("/ls", params={"path": "indexes"}).status_code == 200  # bodiless requests pass
    assert client.post("/apply", json={"op": {"op": "add", "text": "x"}}).status_code == 403


def test_validation_errors_echo_only_a_short_part_of_the_input(built200: Path) -> None:
    client = _client(built200)
    res = client.post("/ask", json={"question": "q" * 50_000})
    assert res.status_code == 422 and len(res.content) < 2_000
    echoed = res.json()["detail"][0]["input"]
    assert echoed.startswith("qqq") and echoed.endswith("(50000 characters in all)")
    res = client.get("/search", params={"query": "w" * 5_000})
    assert res.status_code == 422 and len(res.content) < 2_000


# ----- Host, Origin and token ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("base_url", "status"), [
    ("http://127.0.0.1:8765", 200), ("http://localhost:9999", 200), ("http://[::1]:8765", 200),
    ("http://attacker.example:8765", 421), ("http://127.0.0.1.nip.io:8765", 421), ("http://testserver", 421),
])
def test_host_allow_list_on_loopback(built200: Path, base_url: str, status: int) -> None:
    assert _client(built200, base_url=base_url).get("/ls").status_code == status


def test_cross_origin_requests_are_refused(built200: Path) -> None:
    client = _client(built200)
    assert client.get("/ls", headers={"origin": "http://attacker.example"}).status_code == 403
    assert client.get("/ls", headers={"origin": "http://localhost:3000"}).status_code == 200


def test_guard_for_a_network_address() -> None:
    assert HttpGuard.for_bind("127.0.0.1").allowed_hosts == {"127.0.0.1", "localhost", "::1"}
    assert HttpGuard.for_bind("0.0.0.0").allowed_hosts is None  # noqa: S104 - any Host: a token guards it
    named = HttpGuard.for_bind("10.1.2.3", "t", ["ws.example.org:443"])
    assert named.allowed_hosts == {"127.0.0.1", "localhost", "::1", "10.1.2.3", "ws.example.org"}


def test_bearer_token(writable: Path) -> None:
    client = _client(writable, write=True, guard=HttpGuard(token="correct-horse-battery"))
    assert client.get("/ls").status_code == 401
    assert client.get("/ls").headers["www-authenticate"] == "Bearer"
    assert client.get("/ls", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/apply", json={"op": {"op": "add", "text": "sneaky"}}).status_code == 401
    auth = {"authorization": "Bearer correct-horse-battery"}
    assert client.get("/ls", headers=auth).status_code == 200
    assert client.post("/apply", json={"op": {"op": "add", "text": "allowed"}}, headers=auth).status_code == 200
    nodes, _ = codec.read_parquet(writable / "snapshot.parquet")
    texts = {n.text for n in nodes}
    assert "allowed" in texts and "sneaky" not in texts


def test_write_on_a_network_address_needs_a_token(writable: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("LIBRARIAN_SERVE_TOKEN", raising=False)
    assert serve_main([str(writable), "--api", "--write", "--host", "0.0.0.0"]) == 2  # noqa: S104
    assert "needs a bearer token" in capsys.readouterr().err
    assert serve_main([str(writable), "--api", "--max-body-bytes", "0"]) == 2
    assert "--max-body-bytes must be at least 1" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_server_checks_host_token_and_size(writable: Path) -> None:
    """uvicorn in its own process, as `librarian serve --api --write` runs it, the token from the environment."""
    port = _free_port()
    env = {**os.environ, "LIBRARIAN_SERVE_TOKEN": "tok-from-env", "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "librarian.cli", "serve", str(writable), "--api", "--write",
                             "--port", str(port), "--max-body-bytes", "100000"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(proc.stderr.read().decode()[-2000:]) from None
                time.sleep(0.2)
        url, auth = f"http://127.0.0.1:{port}", {"authorization": "Bearer tok-from-env"}
        with httpx.Client(base_url=url, timeout=30) as http:
            assert http.get("/ls").status_code == 401
            assert http.get("/ls", headers={**auth, "host": f"rebound.example:{port}"}).status_code == 421
            assert http.get("/ls", headers=auth).status_code == 200
            big = http.post("/apply", headers=auth, json={"op": {"op": "add", "text": "z" * 200_000}})
            assert big.status_code == 413
            ok = http.post("/apply", headers=auth, json={"op": {"op": "add", "text": "over the wire"}})
            assert ok.status_code == 200 and ok.json()["created"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert any(n.text == "over the wire" for n in codec.read_parquet(writable / "snapshot.parquet")[0])


# ----- /apply: bad text, and atomic with saving -------------------------------------------------------------------

def test_a_search_query_is_echoed_escaped(built200: Path) -> None:
    service = WorkspaceService(open_workspace(built200))
    text = service.search("Bellweather\x1b]0;pwned\x07\u202e \ud83d")["text"]
    assert text.startswith('search "Bellweather\\x1b]0;pwned\\x07\\u202e \\ud83d" page 1')
    text.encode("utf-8")

def test_apply_refuses_bad_text_with_a_clear_400(writable: Path) -> None:
    client = _client(writable, write=True)
    body = '{"op": {"op": "add", "text": "smile \\ud83d", "path": "notes/s"}}'  # a lone surrogate, as JSON allows
    res = client.post("/apply", content=body, headers={"content-type": "application/json"})
    assert res.status_code == 400 and "lone surrogate" in res.json()["detail"]
    res = client.post("/apply", json={"op": {"op": "add", "text": "line\x07bell\x1b[31mred"}})
    assert res.status_code == 400 and "control character" in res.json()["detail"]
    res = client.post("/apply", json={"op": {"op": "add", "text": "gpj.\u202eexe"}})
    assert res.status_code == 400 and "invisible format character U+202E" in res.json()["detail"]
    res = client.post("/apply", json={"op": {"op": {"x": 1}}})
    assert res.status_code == 400 and "'op' must be one of" in res.json()["detail"]
    assert client.post("/apply", json={"op": {"op": "add", "text": "fine", "path": "notes/s"}}).status_code == 200
    entries = read_trace(writable / SERVE_TRACE)
    assert [e.op["text"] for e in entries] == ["fine"]
    reopened = open_workspace(writable, writable=True).source
    assert reopened.by_path("notes/s").text == "fine"


def test_an_op_that_cannot_be_saved_is_taken_back(writable: Path) -> None:
    service = WorkspaceService(open_workspace(writable, writable=True), write=True)
    client = TestClient(make_app(service), base_url=LOCAL)
    ws = service.opened.source
    before, version = ws.state(), ws.version
    snapshot = writable / "snapshot.parquet"
    saved = snapshot.read_bytes()
    snapshot.unlink()
    (snapshot / "blocker").mkdir(parents=True)  # the snapshot path is now a non-empty folder: the save fails
    res = client.post("/apply", json={"op": {"op": "add", "text": "lost?", "path": "notes/lost"}})
    assert res.status_code == 500 and "the op was not applied" in res.json()["detail"]
    assert ws.state() == before and ws.version == version
    assert client.get("/read", params={"path": "notes/lost"}).status_code == 404
    assert "notes/lost" not in [h["path"] for h in client.get("/search", params={"query": "lost"}).json()["hits"]]
    assert not (writable / SERVE_TRACE).exists() or read_trace(writable / SERVE_TRACE) == []
    shutil.rmtree(snapshot)
    snapshot.write_bytes(saved)
    res = client.post("/apply", json={"op": {"op": "add", "text": "kept", "path": "notes/kept"}})
    assert res.status_code == 200 and res.json()["step"] == before[1].step + 1
    reopened = open_workspace(writable, writable=True).source
    assert reopened.by_path("notes/kept").text == "kept" and reopened.by_path("notes/lost") is None
    assert [e.op["path"] for e in read_trace(writable / SERVE_TRACE)] == ["notes/kept"]


# ----- workspace.json cannot point outside the folder ---------------------------------------------------------------

@pytest.mark.parametrize("index", ["../other/index", "/ABS/index", "index/../../other/index", ".", 3, ""])
def test_manifest_index_outside_the_folder_is_refused(built200: Path, tmp_path: Path, index) -> None:
    other = tmp_path / "other"
    shutil.copytree(built200 / "index", other / "index")
    ws = tmp_path / "ws"
    shutil.copytree(built200, ws, ignore=shutil.ignore_patterns("export", "view", "index"))
    manifest = json.loads((ws / "workspace.json").read_text())
    manifest["index"] = str(other / "index") if index == "/ABS/index" else index
    (ws / "workspace.json").write_text(json.dumps(manifest))
    with pytest.raises(WorkspaceError, match="'index'"):
        open_workspace(ws)


def test_an_index_link_leading_outside_the_folder_is_refused(built200: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(built200, ws, ignore=shutil.ignore_patterns("export", "view", "index"))
    shutil.copytree(built200 / "index", tmp_path / "elsewhere")
    (ws / "index").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(WorkspaceError, match="outside the build folder"):
        open_workspace(ws)
    shutil.copytree(built200, tmp_path / "fine", ignore=shutil.ignore_patterns("export", "view"))
    assert open_workspace(tmp_path / "fine").index is not None  # the index inside the folder still opens
