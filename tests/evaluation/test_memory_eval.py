"""JAM researcher evaluation: arms, metrics, runtime figures, loaders, plot and table."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from librarian.datasets.memorygym import MemoryGymConfig, build_memorygym
from librarian.datasets.records import DatasetError, Question, write_parquet
from librarian.evaluation.memory_arms import build_store, one_shot
from librarian.evaluation.memory_eval import (
    ARMS,
    ResearcherEvalConfig,
    answer_in_context,
    arm_contexts,
    evaluate_researcher,
)
from librarian.evaluation.memory_report import arms_table, plot_arms
from librarian.evaluation.memory_tasks import KINDS, MemoryTask, load_memory_tasks, local_id, memorygym_task
from librarian.evaluation.plots import PlotError
from librarian.models import make_backend
from librarian.models.scripted import ScriptedBackend
from librarian.roles.research_context import research_context, with_mode
from librarian.roles.toolbox import TOOLS
from librarian.roles.tools import run_tool
from librarian.workspace import Document
from librarian.workspace.paths import validate_id
from tests.datasets.formats import write_hotpot, write_locomo, write_longmemeval, write_narrativeqa

FAST = ResearcherEvalConfig(embedder="hashing", n_boot=400)


@pytest.fixture(scope="module")
def task():
    return memorygym_task(MemoryGymConfig(speakers=4, sessions=30, seed=3))


@pytest.fixture(scope="module")
def scripted():
    return make_backend("scripted", policy="jam_researcher")


@pytest.fixture(scope="module")
def result(task, scripted):
    return evaluate_researcher([task], scripted, FAST, progress=False)


def test_memorygym_task_support_is_session_ids(task):
    ids = {s.id for s in task.sessions}
    assert len(task.sessions) == 30 and task.questions
    assert all(q.support and set(q.support) <= ids for q in task.questions)
    test_only = memorygym_task(MemoryGymConfig(speakers=4, sessions=30, seed=3), split="test")
    assert 0 < len(test_only.questions) < len(task.questions) and {q.split for q in test_only.questions} == {"test"}


def test_task_rejects_support_outside_its_sessions():
    q = Question(id="q1", question="?", answers=["a"], split="test", qclass="x", template="x", collection="c",
                 support=["s9"])
    with pytest.raises(DatasetError, match="support s9 is not among the task's 1 sessions"):
        MemoryTask("t", (Document("s1", "text"),), (q,))


def test_flat_store_is_the_raw_layer_of_the_hierarchical_one(task):
    hier = build_store(task.sessions, "hierarchical")
    flat = build_store(task.sessions, "flat")
    raw = sorted((n.path, n.text) for n in hier.workspace if n.kind == "raw")
    assert sorted((n.path, n.text) for n in flat.workspace if n.kind == "raw") == raw
    assert not [n for n in flat.workspace if n.kind == "synthetic"]
    assert [n for n in hier.workspace if n.kind == "synthetic"] and hier.build_s >= 0 and flat.kind == "flat"
    with pytest.raises(ValueError, match="unknown store kind 'tree'"):
        build_store(task.sessions, "tree")  # type: ignore[arg-type]


def test_hierarchical_beats_flat_with_confidence_intervals(result, task):
    arms = result["arms"]
    assert set(arms) == set(ARMS) and result["n_questions"] == len(task.questions)
    for name, arm in arms.items():
        lo, hi = arm["source_recall_ci"]
        assert lo <= arm["source_recall"] <= hi, name
        assert arm["n"] == len(task.questions) and 0 <= arm["answer_in_context"] <= 1
        assert arm["query_latency_s_p50"] <= arm["query_latency_s_p95"] and arm["construction_s"] > 0
    assert arms["hierarchical"]["source_recall"] >= 0.9
    lo, hi = result["hierarchical_minus_flat_ci"]
    assert 0 < lo < result["hierarchical_minus_flat"] < hi  # a strict win: the 95% CI excludes a tie
    assert result["hierarchical_minus_flat"] == pytest.approx(
        arms["hierarchical"]["source_recall"] - arms["flat"]["source_recall"])
    assert 1 <= arms["hierarchical"]["rounds_mean"] <= 20 and arms["no_researcher"]["rounds_mean"] == 0
    rows = result["per_question"]
    assert len(rows) == len(ARMS) * len(task.questions)
    assert {"task", "question", "arm", "recall", "rounds", "latency_s"} <= set(rows[0])
    json.dumps(result)  # results.json-ready


def test_one_shot_sources_are_traced_to_raw_sessions(task):
    ctx = research_context(build_store(task.sessions, "hierarchical").workspace, embedder="hashing")
    q = task.questions[0]
    res = one_shot(ctx, q.question, k=5)
    ids = {s.id for s in task.sessions}
    assert res.sources and set(res.sources) <= ids
    memos = [p for p in res.cited if p.startswith("memory/")]
    assert memos, "the hierarchical store's memos should be among the hits"
    for path in memos:
        node = ctx.workspace.by_path(path)
        assert set(node.provenance) <= set(res.sources)
    assert res.context.startswith(f"[{res.cited[0]}]")
    with pytest.raises(ValueError, match="k must be >= 1"):
        one_shot(ctx, q.question, k=0)


def test_ablation_arms_change_the_search_mode(task):
    ctxs, built = arm_contexts(task, ("hierarchical", "no_bm25", "no_dense"), FAST, None)
    assert {a: c.search_mode for a, c in ctxs.items()} == {"hierarchical": "hybrid", "no_bm25": "dense",
                                                          "no_dense": "bm25"}
    assert built["no_bm25"] == built["hierarchical"]  # same store and index
    # a word in no document: BM25 finds nothing, the (hashing) dense index still ranks something
    dense = run_tool(TOOLS["jam.search"], ctxs["no_bm25"], {"query": "zzzqqq"})
    lexical = run_tool(TOOLS["jam.search"], ctxs["no_dense"], {"query": "zzzqqq"})
    assert lexical.text.endswith("no hits") and "1. id=" in dense.text
    with pytest.raises(ValueError, match="unknown search mode 'fuzzy'"):
        with_mode(ctxs["hierarchical"], "fuzzy")


def test_budget_exhaustion_is_counted(task, scripted):
    small = MemoryTask("mg", task.sessions, task.questions[:6])
    cfg = ResearcherEvalConfig(arms=("hierarchical", "no_researcher"), budget=1, embedder="hashing", n_boot=100)
    out = evaluate_researcher([small], scripted, cfg, progress=False)
    assert out["arms"]["hierarchical"]["budget_exhausted"] == 1.0
    assert out["arms"]["hierarchical"]["rounds_mean"] == 1
    assert out["arms"]["no_researcher"]["budget_exhausted"] == 0.0
    assert "hierarchical_minus_flat" not in out


@pytest.mark.parametrize("kind", ["locomo", "longmemeval", "hotpotqa", "narrativeqa"])
def test_loader_files_run_end_to_end(kind, tmp_path, scripted):
    path = {"locomo": lambda: write_locomo(tmp_path / "locomo10.json"),
            "longmemeval": lambda: write_longmemeval(tmp_path / "longmemeval_s.json"),
            "hotpotqa": lambda: write_hotpot(tmp_path / "hotpot_dev_distractor_v1.json"),
            "narrativeqa": lambda: write_narrativeqa(tmp_path / "narrativeqa")}[kind]()
    tasks = load_memory_tasks(kind, path)
    assert tasks and all(t.name.startswith(kind) for t in tasks)
    for t in tasks:
        assert all("/" not in s.id and s.metadata["source_id"] for s in t.sessions)
    with_support = sum(1 for t in tasks for q in t.questions if q.support)
    cfg = ResearcherEvalConfig(embedder="hashing", n_boot=100)
    out = evaluate_researcher(tasks, scripted, cfg, progress=False)
    assert out["n_questions"] == with_support
    assert out["skipped_no_support"] == sum(len(t.questions) for t in tasks) - with_support
    for arm in out["arms"].values():
        assert 0.0 <= arm["source_recall"] <= 1.0 and arm["n"] == with_support
    if kind == "locomo":  # one task per conversation; the adversarial question has no evidence
        assert [t.name for t in tasks] == ["locomo/conv-1"] and out["skipped_no_support"] == 1
    if kind == "longmemeval":  # one task per question's haystack
        assert [t.name for t in tasks] == ["longmemeval/q1", "longmemeval/q2_abs"]


def test_memorygym_folder_from_librarian_data(tmp_path, task):
    write_parquet(build_memorygym(MemoryGymConfig(speakers=4, sessions=30, seed=3)), tmp_path / "mg")
    (loaded,) = load_memory_tasks("memorygym", tmp_path / "mg")
    assert loaded.name == "memorygym" and [s.id for s in loaded.sessions] == [s.id for s in task.sessions]
    assert [q.support for q in loaded.questions] == [q.support for q in task.questions]
    assert len(load_memory_tasks("memorygym", tmp_path / "mg", split="test")[0].questions) < len(task.questions)
    with pytest.raises(DatasetError, match="no question has split 'dev'"):
        load_memory_tasks("memorygym", tmp_path / "mg", split="dev")


def test_bad_kind_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="valid kinds: " + ", ".join(KINDS)):
        load_memory_tasks("squad", tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        load_memory_tasks("locomo", tmp_path / "nope.json")
    with pytest.raises(DatasetError, match="corpus.parquet: not found"):
        load_memory_tasks("memorygym", tmp_path)


def test_config_errors(task, scripted):
    with pytest.raises(ValueError, match="unknown arm"):
        ResearcherEvalConfig(arms=("hierarchical", "oracle"))
    with pytest.raises(ValueError, match="budget must be a positive integer"):
        ResearcherEvalConfig(budget=0)
    with pytest.raises(ValueError, match="embedder must be"):
        ResearcherEvalConfig(embedder="bert")
    with pytest.raises(ValueError, match="at least one task"):
        evaluate_researcher([], scripted, FAST)


def test_plot_and_table(result, tmp_path):
    png = plot_arms(result, tmp_path / "arms.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = arms_table(result)
    assert table.count("\n| ") == len(ARMS) and "hierarchical - flat source recall" in table
    assert "recall 95% CI" in table and "client score" not in table
    with pytest.raises(PlotError, match="no 'arms'"):
        plot_arms({}, tmp_path / "x.png")
    with pytest.raises(PlotError, match=".png"):
        plot_arms(result, tmp_path / "x.svg")


def test_client_backend_scored_with_the_official_metric(task):
    small = MemoryTask("mg", task.sessions, task.questions[:4])
    gold = {q.question: q.answers[0] for q in small.questions}

    def client_policy(messages, tools):
        question = messages[-1]["content"].rsplit("Question: ", 1)[1]
        return gold[question]  # an oracle client: the official metric gives 1.0

    client = ScriptedBackend(client_policy)
    cfg = ResearcherEvalConfig(arms=("no_researcher",), embedder="hashing", n_boot=100)
    out = evaluate_researcher([small], make_backend("scripted", policy="jam_researcher"), cfg, progress=False,
                              client=client)
    assert out["arms"]["no_researcher"]["client_score"] == 1.0


@pytest.mark.slow
def test_minilm_hybrid_search_arm(task, scripted):
    small = MemoryTask("mg", task.sessions, task.questions[:8])
    cfg = ResearcherEvalConfig(arms=("hierarchical", "no_researcher"), embedder="minilm", n_boot=100)
    out = evaluate_researcher([small], scripted, cfg, progress=False)
    assert out["config"]["embedder"] == "minilm"
    assert out["arms"]["hierarchical"]["source_recall"] >= out["arms"]["no_researcher"]["source_recall"]


_PRINTABLE = st.characters(categories=("L", "N", "P", "S", "Zs"))


@given(st.text(_PRINTABLE, min_size=1, max_size=40), st.sampled_from(["conv-1", "q1", "hp", "x/y"]))
def test_local_id_is_one_valid_path_name(doc_id, collection):
    out = local_id(doc_id, collection)
    assert "/" not in out and out not in ("", ".", "..")
    assert validate_id(out) == out
    if "/" not in doc_id and doc_id.strip() == doc_id and doc_id not in (".", ".."):
        assert out == doc_id  # ids that are already one clean name stay as they are
    assert local_id(f"{collection}/{doc_id}", collection) == local_id(doc_id, collection)


_ASCII = st.text(string.ascii_letters + " ", max_size=30)


@given(st.text(string.ascii_letters, min_size=1, max_size=20), _ASCII, _ASCII)
def test_answer_in_context_is_case_insensitive(answer, before, after):
    assert answer_in_context(before + answer.upper() + after, [answer.lower()])
    assert answer_in_context(before + answer.lower() + after, ["  ", answer.upper()])
    assert not answer_in_context(before.replace(answer[0], "") + "!", [answer[0] + "!" + answer])
    assert not answer_in_context(before + answer, ["   "])  # a blank answer never matches
