"""`serve --curate`: tagged answers, the traffic log, feedback, curation rounds, swaps, refusals and rollback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from librarian.answering.config import AskConfig
from librarian.app.build import BuildConfig
from librarian.app.build import run as build
from librarian.app.online_serve import CurateOptions, OnlineServer, evidence_judge
from librarian.app.rollback import main as rollback_main
from librarian.app.serve_http import make_app
from librarian.app.service import WorkspaceService
from librarian.app.workspace_dir import open_workspace
from librarian.datasets.records import read_parquet as read_bundle
from librarian.models.scripted import ScriptedBackend, task_question, tool_call_text
from librarian.online.curation import CurationConfig, held_back
from librarian.workspace import codec, replay


@pytest.fixture(scope="module")
def flat_builds(kb200: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The 200-person KBGym facts built flat (no index documents), raw immutable and editable."""
    out = {}
    for policy in ("immutable", "editable"):
        folder = tmp_path_factory.mktemp(f"flat-{policy}") / "ws"
        build(BuildConfig(corpus=str(kb200), out_dir=str(folder), builder="flat", embedder="none", export=False,
                          raw_policy=policy))
        out[policy] = folder
    return out


@pytest.fixture(scope="module")
def questions(kb200: Path) -> list:
    return [q for q in read_bundle(kb200).questions if q.split in ("train", "test_in")]


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ws"
    shutil.copytree(src, dst)
    return dst


def _server(folder: Path, curator: object = None, **curation: object) -> tuple[OnlineServer, TestClient]:
    service = WorkspaceService(open_workspace(folder, embedder="none"))
    opts = CurateOptions(CurationConfig(**{"holdback": 0.3, "check_min_questions": 3, **curation}), every_s=3600)
    server = OnlineServer(folder, service, AskConfig(reader="kbgym"), opts, curator=curator)
    return server, TestClient(make_app(service, server.ask, None, server.feedback), base_url="http://127.0.0.1:8765")


def _ask_all(client: TestClient, qs: list, feedback: bool = True) -> list[dict]:
    out = []
    for q in qs:
        res = client.post("/ask", json={"question": q.question})
        assert res.status_code == 200, res.text
        out.append(res.json())
        if feedback:
            fb = client.post("/feedback", json={"request_id": out[-1]["request_id"], "gold": list(q.answers)})
            assert fb.status_code == 200, fb.text
    return out


def test_answers_are_tagged_logged_and_curated_into_a_new_version(flat_builds, questions, tmp_path) -> None:
    folder = _copy(flat_builds["immutable"], tmp_path)
    server, client = _server(folder)
    before = server.online.current
    answers = _ask_all(client, questions[:40])
    assert {a["version"] for a in answers} == {0}
    assert {a["snapshot_hash"] for a in answers} == {before.snapshot_hash}
    logged = pq.read_table(folder / "online" / "traffic" / "asks").to_pylist()
    assert sorted(r["request_id"] for r in logged) == sorted(a["request_id"] for a in answers)
    row = next(r for r in logged if r["request_id"] == answers[0]["request_id"])
    turns = json.loads(row["trajectory"])
    assert row["actions"] == answers[0]["actions"] == sum(max(1, len(t["calls"])) for t in turns)
    assert turns[0]["calls"][0]["name"] == "search" and row["question"] == questions[0].question

    report = server.curate_once()
    assert report is not None and report.decision == "swapped", report.reason
    assert report.version == 1 and server.online.store.head() == 1 and report.ops > 0
    assert not set(report.questions) & {a["request_id"] for a in answers if held_back(a["request_id"], 0.3)}
    assert len(report.check["sample"]) >= 3 and report.check["f1_candidate"] >= report.check["f1_current"] - 0.03
    after = server.online.current
    assert after.version == 1 and after.snapshot_hash != before.snapshot_hash
    assert before.workspace.content_hash() == before.snapshot_hash  # a reader holding version 0 still has it whole
    store = server.online.store
    assert replay(store.load(0), store.trace(1)).content_hash() == after.snapshot_hash
    again = client.post("/ask", json={"question": questions[0].question}).json()
    assert again["version"] == 1 and again["snapshot_hash"] == after.snapshot_hash
    new = after.workspace.get(next(i for e in store.trace(1) for i in e.created))
    hits = client.get("/search", params={"query": new.text}).json()["hits"]
    assert new.id in [h["id"] for h in hits], "the tools serve version 1 too"
    assert client.get("/read", params={"path": new.path}).status_code == 200
    assert server.curate_once() is None  # nothing new to curate
    rows = pq.read_table(folder / "online" / "curations").to_pylist()
    assert [r["decision"] for r in rows] == ["swapped"] and "held-back" in rows[0]["reason"]


def test_feedback_is_validated(flat_builds, questions, tmp_path) -> None:
    server, client = _server(_copy(flat_builds["immutable"], tmp_path))
    rid = _ask_all(client, questions[:1], feedback=False)[0]["request_id"]
    assert client.post("/feedback", json={"request_id": "nope", "correct": True}).status_code == 404
    missing = client.post("/feedback", json={"request_id": rid})
    assert missing.status_code == 400 and "gold" in missing.json()["detail"]
    assert client.post("/feedback", json={"request_id": rid, "correct": "maybe"}).status_code == 422
    ok = client.post("/feedback", json={"request_id": rid, "correct": False})
    assert ok.status_code == 200 and ok.json()["request_id"] == rid
    item = next(i for i in server.traffic.logged() if i.request_id == rid)
    assert item.verdict is False and item.gold == ()
    plain = TestClient(make_app(server.service), base_url="http://127.0.0.1:8765")
    assert plain.post("/feedback", json={"request_id": rid, "correct": True}).status_code == 403


def _eraser(messages, tools) -> str:
    """A harmful curator: it erases the first fact its search finds for the question."""
    said = [m["content"] for m in messages if m["role"] == "assistant"]
    if not said:
        return tool_call_text("search", query=task_question(messages).split("\n")[0])
    if len(said) == 1:
        hit = re.search(r"id=(\S+)\s+\[raw\]", messages[-1]["content"])
        if hit:
            return tool_call_text("edit", id=hit.group(1), text="Nothing is known here.")
    return tool_call_text("done")


def test_a_candidate_that_loses_f1_is_refused_and_the_log_says_why(flat_builds, questions, tmp_path) -> None:
    folder = _copy(flat_builds["editable"], tmp_path)
    server, client = _server(folder, curator=ScriptedBackend(_eraser), check_min_questions=1, holdback=0.5,
                             dedup_threshold=0.0)
    q = next(q for q in questions if q.template == "qc1_job")
    answers = _ask_all(client, [q] * 12)  # the same question: some held back, some curated
    assert any(held_back(a["request_id"], 0.5) for a in answers) and not all(
        held_back(a["request_id"], 0.5) for a in answers)
    report = server.curate_once()
    assert report.decision == "refused" and report.ops > 0, report.reason
    assert "F1 on the held-back sample falls" in report.reason and report.check["f1_candidate"] < 1.0
    assert server.online.current.version == 0 and server.online.store.numbers() == [0]
    assert client.post("/ask", json={"question": q.question}).json()["answer"] == answers[0]["answer"]
    row = pq.read_table(folder / "online" / "curations").to_pylist()[0]
    assert row["decision"] == "refused" and row["reason"] == report.reason and row["version"] is None


def _broken(messages, tools) -> str:
    raise RuntimeError("the curator's model is down")


def test_a_curation_that_fails_swaps_nothing(flat_builds, questions, tmp_path) -> None:
    folder = _copy(flat_builds["immutable"], tmp_path)
    server, client = _server(folder, curator=ScriptedBackend(_broken))
    _ask_all(client, questions[:10])
    report = server.curate_once()
    assert report.decision == "failed" and "the curator's model is down" in report.reason
    assert server.online.current.version == 0 and client.get("/ls").status_code == 200
    assert not (folder / "online" / "versions").exists() or not list((folder / "online" / "versions").iterdir())


def test_a_judge_decides_where_no_feedback_came_back(flat_builds, questions, tmp_path) -> None:
    folder = _copy(flat_builds["immutable"], tmp_path)
    service = WorkspaceService(open_workspace(folder, embedder="none"))
    prompts: list[str] = []

    def judge(messages, tools) -> str:
        prompts.append(messages[-1]["content"])
        return "The response matches what was read.\ncorrect: yes"

    opts = CurateOptions(CurationConfig(holdback=0.3, check_min_questions=1), every_s=3600, feedback_wait_s=0.0)
    server = OnlineServer(folder, service, AskConfig(reader="kbgym"), opts)
    server.judge = evidence_judge(ScriptedBackend(judge))
    client = TestClient(make_app(service, server.ask, None, server.feedback), base_url="http://127.0.0.1:8765")
    answers = _ask_all(client, questions[:20], feedback=False)
    ready, _ = server.ready()
    curated = [a for a in answers if not held_back(a["request_id"], 0.3) and a["answer"]]
    assert {i.request_id for i in ready} == {a["request_id"] for a in curated}
    assert all(i.verdict is True and i.reference() == (i.answer,) for i in ready)
    assert len(prompts) == len(curated) and all("Reference answer:" in p for p in prompts)
    assert any("job is" in p for p in prompts)  # the reference is what the reader read: fact sentences


def test_rollback_serves_an_earlier_version_and_the_server_follows(flat_builds, questions, tmp_path, capsys) -> None:
    folder = _copy(flat_builds["immutable"], tmp_path)
    server, client = _server(folder, action_tolerance=0.05)  # versions must keep coming for the rollback to matter
    _ask_all(client, questions[:30])
    assert server.curate_once().decision == "swapped"
    _ask_all(client, questions[30:60])
    second = server.curate_once()
    assert second.decision == "swapped" and second.version == 2
    assert rollback_main([str(folder), "--list"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^\*\s+2\s+parent\s+1", listing, re.M) and re.search(r"^\s+0\s+parent", listing, re.M)
    assert rollback_main([str(folder), "9"]) == 2 and "no version 9" in capsys.readouterr().err
    assert rollback_main([str(folder), "1", "--reason", "bad answers"]) == 0
    assert server.online.follow_head() and server.online.current.version == 1
    assert client.post("/ask", json={"question": questions[0].question}).json()["version"] == 1
    assert open_workspace(folder).version == 1  # `ask` and `serve` without --curate open HEAD too
    with pytest.raises(Exception, match="roll back to 0"):
        open_workspace(folder, writable=True)
    third = (_ask_all(client, questions[60:90]), server.curate_once())[1]
    assert third.version == 3 and server.online.store.info(3)["parent"] == 1  # curation goes on from version 1
    rows = pq.read_table(folder / "online" / "curations").to_pylist()
    assert [r["decision"] for r in rows] == ["swapped", "swapped", "rollback", "swapped"]
    assert rows[2]["reason"] == "bad answers" and rows[2]["base_version"] == 2 and rows[2]["version"] == 1
    nodes, meta = codec.read_parquet(server.online.store.paths(3).snapshot)
    assert codec.content_hash(nodes, meta) == server.online.current.snapshot_hash


def test_serve_refuses_curate_with_write_or_a_snapshot_file(flat_builds, tmp_path) -> None:
    folder = flat_builds["immutable"]
    base = [sys.executable, "-m", "librarian.cli", "serve"]
    env = {k: v for k, v in os.environ.items() if k != "LIBRARIAN_SERVE_TOKEN"}
    for extra in ([str(folder), "--api", "--curate", "--write"], [str(folder / "snapshot.parquet"), "--curate"],
                  [str(folder), "--curate", "--holdback", "1.5"],
                  [str(folder), "--api", "--curate", "--host", "0.0.0.0"]):  # feedback changes it: a token first
        proc = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 2 and proc.stderr.startswith("librarian serve: "), proc.stderr
    assert not (folder / "online").exists()


def test_mcp_ask_and_feedback_tools_over_stdio(flat_builds, questions, tmp_path) -> None:
    folder = _copy(flat_builds["immutable"], tmp_path)
    params = StdioServerParameters(command=sys.executable, args=["-m", "librarian.cli", "serve", str(folder),
                                                                 "--curate", "--curate-every", "3600"],
                                   env={"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.getcwd()})
    q = questions[0]

    async def go() -> tuple:
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            answered = await client.call_tool("ask", {"question": q.question})
            rid = answered.structured_content["request_id"]
            fb = await client.call_tool("feedback", {"request_id": rid, "gold": list(q.answers)})
            bad = await client.call_tool("feedback", {"request_id": "nope", "correct": True})
            return names, answered, fb, bad

    names, answered, fb, bad = anyio.run(go)
    assert names == ["ls", "read", "open", "search", "ask", "feedback"]
    assert answered.structured_content["version"] == 0 and answered.structured_content["answer"] == q.answers[0]
    assert not fb.is_error and bad.is_error and "no answer with request_id" in bad.content[0].text
    asks = pq.read_table(folder / "online" / "traffic" / "asks").to_pylist()
    feedback = pq.read_table(folder / "online" / "traffic" / "feedback").to_pylist()
    assert [r["source"] for r in asks] == ["mcp"] and feedback[0]["gold"] == list(q.answers)
