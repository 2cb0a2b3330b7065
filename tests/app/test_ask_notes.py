"""`librarian ask` on a user's own notes: the researcher by default, passages with provenance, a model's answer.

The notes (tests/app/data/notes20) are 20 ordinary files written for these
tests: people, projects, meetings, a journal, a recipe, a to-do list.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from librarian.answering.answer import answer
from librarian.answering.config import AskConfig
from librarian.answering.readers import default_reader
from librarian.app.corpus import AskItem
from librarian.app.workspace_dir import open_workspace
from librarian.cli import main as cli
from librarian.models import scripted
from librarian.models.openai_server import serve
from librarian.models.scripted import ScriptedBackend
from librarian.roles import ToolContext
from librarian.roles.researcher import research
from librarian.search import EmbeddedIndex, IndexSync
from librarian.workspace import Document, Workspace

NOTES = Path(__file__).parent / "data" / "notes20"
# question -> the files that hold its answer (any one of them counts)
QUESTIONS = {
    "Who works with Ada?": {"people/ada-lovelace.md"},
    "When is the Nimbus public beta?": {"projects/nimbus.md"},
    "Where will the team offsite be held?": {"meetings/2024-06-12-offsite-planning.md", "travel/porto-offsite.md"},
    "How much storage does Atlas use?": {"projects/atlas.md"},
    "Who mentors Dev Patel?": {"people/dev-patel.md"},
    "How many GPUs does the cluster have?": {"howto/gpu-cluster.md"},
    "When did Kestrel 2.3 ship?": {"projects/kestrel.md"},
    "Which loss did the Nimbus team switch to?": {"meetings/2024-05-06-nimbus-sync.md"},
    "How much water goes into the sourdough?": {"recipes/sourdough.md"},
    "Which workshop accepted Eun-ji Park's paper?": {"journal/2024-09-02.md"},
}


@pytest.fixture(scope="module")
def notes_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The notes built as a user would: `librarian build` with its defaults (entities, MiniLM hybrid index)."""
    out = tmp_path_factory.mktemp("notes") / "ws"
    assert cli(["build", str(NOTES), "--out", str(out)]) == 0
    return out


def test_acceptance_ten_questions_on_twenty_notes_find_the_file_with_the_answer(notes_ws: Path,
                                                                                  tmp_path: Path) -> None:
    questions = tmp_path / "questions.txt"
    questions.write_text("\n".join(QUESTIONS) + "\n", encoding="utf-8")
    out = tmp_path / "ask"
    assert cli(["ask", str(notes_ws), "--questions", str(questions), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert [r["question"] for r in rows] == list(QUESTIONS)
    hits = {r["question"]: bool(QUESTIONS[r["question"]] & set(r["source_files"])) for r in rows}
    print("answer file among the sources:", sum(hits.values()), "of", len(hits), hits)
    assert sum(hits.values()) >= 9, hits
    for r in rows:  # the embedded default: the researcher, searching before it answers
        assert r["reader"] == "jam" and r["searched"] and r["trace"][0]["calls"][1]["name"] == "search"
        assert all(p["file"] in r["source_files"] or p["path"].startswith("entities/") for p in r["passages"])
    assert json.loads((out / "results.json").read_text())["config"]["reader"] == "jam"


def test_the_readme_example_returns_the_passage_with_its_file_and_line(notes_ws: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["ask", str(notes_ws), "Who works with Ada?", "--trace"]) == 0
    text = capsys.readouterr().out
    assert "people/ada-lovelace.md:5: - Works closely with Ben Okafor on the Nimbus forecasting work." in text
    assert "sources (sufficient): people/ada-lovelace.md" in text
    assert "trace:\n  1. open(" in text and "  1. search(" in text and "finalize(" in text


def test_nothing_found_is_said_plainly(notes_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["ask", str(notes_ws), "Who painted the Mona Lisa?", "--jsonl", "-"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["searched"] and not rec["found"] and rec["answer"] is None and rec["passages"] == []
    assert cli(["ask", str(notes_ws), "Who painted the Mona Lisa?"]) == 0
    assert "A: nothing found: no passage in the workspace answers this" in capsys.readouterr().out


def test_the_researcher_keeps_a_passage_that_names_the_asked_entity() -> None:
    """The bug: it browsed projects/nimbus.md ("Owner: Ada Lovelace") and finalized "(nothing relevant found)"."""
    ws = Workspace.from_documents([
        Document("projects/nimbus.md", "# Nimbus\n\nOwner: Ada Lovelace\nStatus: in progress\nGoal: forecasts\n"),
        Document("recipes/bread.md", "# Bread\n\nFlour, water, salt.\nBake at 250 C.\n"),
    ])
    index = EmbeddedIndex("notes")
    IndexSync(index, ws).sync()
    (res,) = research([ToolContext(ws, index)], ["Who works with Ada?"], scripted.make_scripted_backend("jam_researcher"))
    assert "projects/nimbus.md: Owner: Ada Lovelace" in res.result.context
    assert res.result.sources == ("projects/nimbus.md",) and res.result.sufficient


def test_with_an_openai_server_a_model_writes_the_answer_from_the_passages(
        notes_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[list[dict]] = []

    def model(messages, tools=None):  # a stand-in LLM behind a real OpenAI-compatible server
        seen.append(list(messages))
        line = next(ln for ln in messages[-1]["content"].splitlines() if "closely with" in ln)
        return f"Ben Okafor works with Ada {line.split(']')[0]}]."

    with serve(ScriptedBackend(model, name="writer"), model_name="writer") as server:
        code = cli(["ask", str(notes_ws), "Who works with Ada?", "--backend", "openai", "--backend-arg",
                    f"base_url={server.url}", "--backend-arg", "model=writer", "--backend-arg", "max_retries=0",
                    "--jsonl", "-"])
    assert code == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["answer"] == "Ben Okafor works with Ada [people/ada-lovelace.md:5]."
    assert rec["answered_by"] and rec["reader"] == "jam" and "people/ada-lovelace.md" in rec["source_files"]
    (prompt,) = seen  # one request: the passages and the question, no tools
    assert prompt[0]["role"] == "system" and "Question: Who works with Ada?" in prompt[-1]["content"]
    assert "[projects/nimbus.md:3] Owner: Ada Lovelace" in prompt[-1]["content"]


def test_a_model_run_shows_progress_and_only_tool_call_errors_exit_non_zero(
        notes_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real (tiny, random) hf model as the Librarian answerer: it never makes a valid tool call."""
    code = cli(["ask", str(notes_ws), "Who works with Ada?", "--reader", "librarian", "--backend", "hf",
                "--backend-arg", "model=tiny", "--budget", "3", "--max-new-tokens", "24", "--jsonl", "-"])
    captured = capsys.readouterr()
    assert code == 1
    rec = json.loads(captured.out)
    assert rec["answer"] is None and "made no valid tool call in 3 turn(s)" in rec["failure"]
    assert "librarian reader (model turns): 4turn" in captured.err  # 3 turns and the forced answer, as they ran
    assert "1 of 1 question(s) got no answer: the model made no valid tool call" in captured.err


def test_records_of_a_scripted_reader_without_valid_calls_carry_the_failure(notes_ws: Path) -> None:
    opened = open_workspace(notes_ws, embedder="none")
    chatter = ScriptedBackend(lambda messages, tools=None: "I think the answer is Ben.")
    (rec,) = answer(opened, [AskItem("q", "Who works with Ada?")], AskConfig(reader="librarian", budget=2),
                    backend=chatter)
    assert rec["answer"] is None and rec["model_answer"] == "I think the answer is Ben." and rec["failure"]
    good = ScriptedBackend(lambda messages, tools=None: scripted.tool_call_text("answer", text="Ben Okafor"))
    (ok,) = answer(opened, [AskItem("q", "Who works with Ada?")], AskConfig(reader="librarian"), backend=good)
    assert ok["answer"] == "Ben Okafor" and "failure" not in ok


def test_the_reader_is_chosen_by_the_store(notes_ws: Path, built200: Path, tmp_path: Path) -> None:
    assert default_reader(open_workspace(notes_ws, embedder="none")) == "jam"
    assert default_reader(open_workspace(built200)) == "kbgym"
    legacy = tmp_path / "legacy"  # a build from before the manifest recorded the corpus kind
    shutil.copytree(built200, legacy)
    manifest = json.loads((legacy / "workspace.json").read_text())
    del manifest["corpus_kind"]
    manifest["builder"] = "flat"
    (legacy / "workspace.json").write_text(json.dumps(manifest))
    assert default_reader(open_workspace(legacy)) == "kbgym"


def test_an_empty_question_is_refused(notes_ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["ask", str(notes_ws), "   "]) == 2
    assert "the question is empty" in capsys.readouterr().err
