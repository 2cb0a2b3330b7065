"""`librarian ask`: the acceptance run (20 KBGym questions, scripted reader), provenance, batch I/O, readers."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from librarian.answering.answer import answer
from librarian.answering.config import AskConfig
from librarian.answering.records import summarise
from librarian.app.build import BuildConfig, run
from librarian.app.corpus import AskItem, InputError, load_questions
from librarian.app.workspace_dir import open_workspace
from librarian.cli import main as cli
from librarian.models import scripted
from librarian.models.scripted import ScriptedBackend


def test_acceptance_twenty_questions_with_the_scripted_reader(kb200: Path, built200: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ask"
    assert cli(["ask", str(built200), "--questions", str(kb200), "--split", "eval", "--limit", "20",
                "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["questions"] == results["scored"] == 20
    assert results["f1"] >= 0.7 and results["files_read_mean"] > 0
    rows = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and all("trace" in r and "f1" in r for r in rows)
    printed = capsys.readouterr().out
    assert "20 questions: mean F1" in printed and "provenance: indexes/" in printed
    # every provenance path starts at a file the reader read and ends at a raw fact
    for row in rows:
        for path, chains in row["provenance"].items():
            assert path in row["files_read"]
            assert all(c[0] == path and c[-1].startswith("facts/") for c in chains)


def test_curated_store_beats_the_flat_store(kb200: Path, built200: Path, tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    run(BuildConfig(corpus=str(kb200), out_dir=str(flat), builder="flat", embedder="none", export=False))
    items = load_questions(kb200, split="eval")[:20]
    built = summarise(answer(open_workspace(built200), items, AskConfig()))
    plain = summarise(answer(open_workspace(flat), items, AskConfig()))
    assert built["f1"] > plain["f1"]


def test_trace_flag_and_stdin_batch_to_jsonl(built200: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("Which city does Emil Bellweather's father live in?\n"))
    assert cli(["ask", str(built200), "--questions", "-", "--jsonl", "-"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["answer"] and row["trace"][0]["calls"][0]["name"] == "search"
    assert cli(["ask", str(built200), "Which city does Emil Bellweather's father live in?", "--trace"]) == 0
    text = capsys.readouterr().out
    assert "trace:\n  1. search(" in text and "A: " in text


def test_librarian_answerer_reads_files_and_shows_provenance(built200: Path) -> None:
    def reader(messages, tools=None):
        seen = [m for m in messages if m["role"] == "tool"]
        if not seen:
            return scripted.tool_call_text("list", path="indexes/city")
        if len(seen) == 1:
            return scripted.tool_call_text("read", path="indexes/city/port-avel")
        return scripted.tool_call_text("answer", text="several people")

    opened = open_workspace(built200, with_index=False)
    (rec,) = answer(opened, [AskItem("q", "Who lives in Port Avel?", ("x",), "squad_f1")],
                    AskConfig(reader="librarian"), backend=ScriptedBackend(reader), with_trace=True)
    assert rec["files_read"] == ["indexes/city/port-avel"] and rec["f1"] == 0.0
    chains = rec["provenance"]["indexes/city/port-avel"]
    assert chains and all(c[-1].startswith("facts/") for c in chains)
    assert [t["calls"][0]["name"] for t in rec["trace"]] == ["list", "read", "answer"]


def test_readers_that_cannot_run_say_why(built200: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    opened = open_workspace(built200, with_index=False)
    with pytest.raises(InputError, match="no saved index"):
        answer(opened, [AskItem("q", "x")], AskConfig(reader="kbgym"))
    assert cli(["ask", str(tmp_path), "anything"]) == 2
    assert "has no snapshot.parquet" in capsys.readouterr().err
