"""The reactive retrieve-and-read readers, the AutoCompaction-style summariser and the untrained builder."""

from __future__ import annotations

from dataclasses import replace

import pytest

from librarian.datasets import to_documents
from librarian.datasets.kbgym.build import build_kbgym
from librarian.evaluation.baselines import BaselineError, build_baseline
from librarian.evaluation.baselines.autocompaction import chunks
from librarian.evaluation.exam import summarize
from librarian.models.scripted import make_scripted_backend
from librarian.models.scripted.reactive import ReactiveReader
from librarian.rewards.probe_exam import ReaderSpec, run_local
from librarian.search.factory import SearchConfig
from librarian.workspace import Document, Workspace, replay
from librarian.workspace.invariants import invariant_violations

TINY = {"backend": "hf", "backend_args": {"model": "tiny"}}


@pytest.fixture(scope="module")
def kb():
    return build_kbgym(people=80, seed=3)


@pytest.fixture(scope="module")
def flat(kb) -> Workspace:
    return Workspace.from_documents([replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)],
                                    raw_policy="editable")


def _valid(result, flat: Workspace) -> None:
    ws = result.workspace
    assert invariant_violations(*ws.state()) == []
    assert {n.id: n.text for n in ws if n.kind == "raw"} == {n.id: n.text for n in flat if n.kind == "raw"}
    assert len(ws.trace) == result.ops == ws.version
    assert replay(flat, ws.trace).content_hash() == ws.content_hash()


# ---- reactive retrieve-and-read --------------------------------------------------------------------


def test_reactive_reader_answers_from_search_results_only(flat, kb) -> None:
    questions = kb.bundle.split("test_in")[::3]
    spec = ReaderSpec(options={"policy": "reactive_reader"})
    results = run_local(flat, questions, spec)
    assert all(r.actions <= 3 and r.files_read == 0 and r.end == "answer" for r in results)  # no reads at all
    reactive = summarize(results)
    planner = summarize(run_local(flat, questions, ReaderSpec()))
    assert 0.1 < reactive["f1"] < planner["f1"]  # it answers some questions, fewer than the navigating reader
    assert reactive["actions"] < planner["actions"]


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_reactive_reader_over_dense_and_hybrid_search(flat, kb, mode) -> None:
    questions = [q for q in kb.bundle.split("test_in") if q.qclass == kb.bundle.split("test_in")[0].qclass][:6]
    spec = ReaderSpec(options={"policy": "reactive_reader"}, search_mode=mode,
                      search=SearchConfig(embedder="hashing"))
    results = run_local(flat, questions, spec)
    assert len(results) == 6 and all(r.end == "answer" and r.actions <= 3 for r in results)


def test_reactive_reader_stops_at_its_pages_or_the_budget() -> None:
    reader = ReactiveReader(pages=1)
    opening = [{"role": "system", "content": "You have 15 actions."},
               {"role": "user", "content": "Question: What is Ada Moss's job?"}]
    assert '"search"' in reader(opening) and '"page": 1' in reader(opening)
    page = ('search "What is Ada Moss\'s job?" page 1: 1 hit (more on page 2)\n'
            "1. id=kb1  [raw] facts/kb1\n   Ada Moss's job is baker.")
    seen = [*opening, {"role": "assistant", "content": reader(opening)}, {"role": "tool", "content": page}]
    assert reader(seen) == '<tool_call>{"name": "answer", "arguments": {"text": "baker"}}</tool_call>'
    assert '"search"' in ReactiveReader(pages=2)(seen)
    with pytest.raises(ValueError, match="pages must be >= 1"):
        ReactiveReader(pages=0)
    assert "reactive_reader" in make_scripted_backend("reactive_reader").name


# ---- AutoCompaction ----------------------------------------------------------------------------------


def test_autocompaction_summarises_every_document_once_with_provenance(flat) -> None:
    result = build_baseline("autocompaction", flat, chunk_tokens=60)
    _valid(result, flat)
    summaries = sorted((n for n in result.workspace if n.kind == "synthetic"), key=lambda n: n.path)
    assert len(summaries) == result.info["summaries"] > 1 and result.construction_tokens > 0
    covered = [i for s in summaries for i in s.provenance]
    assert sorted(covered) == sorted(n.id for n in flat if n.kind == "raw")  # each document in one chunk
    assert all(s.text and not s.links and s.path.startswith("compacted/") for s in summaries)
    for s in summaries:  # each line is `source path: its sentences`, from the summary's own chunk
        by_path = {flat.get(i).path: flat.get(i).text for i in s.provenance}
        for line in s.text.splitlines():
            path, said = line.split(": ", 1)
            assert said.removesuffix("...") in by_path[path]


def test_autocompaction_chunks_and_options() -> None:
    docs = [(f"d{i}", "x" * 40) for i in range(7)]  # 10 tokens each
    assert [len(c) for c in chunks(docs, 25, 40)] == [3, 3, 1]
    assert [len(c) for c in chunks(docs, 1000, 2)] == [2, 2, 2, 1]
    with pytest.raises(BaselineError, match="executor must be"):
        build_baseline("autocompaction", Workspace.from_documents([]), executor="magic")
    with pytest.raises(BaselineError, match="max_chars >= 20"):
        build_baseline("autocompaction", Workspace.from_documents([]), max_chars=5)
    with pytest.raises(BaselineError, match="unknown option"):
        build_baseline("autocompaction", Workspace.from_documents([]), chunk=3)


@pytest.mark.slow
def test_autocompaction_with_an_llm_executor(flat) -> None:
    raw = [n for n in flat if n.kind == "raw"][:6]
    small = Workspace.from_documents([Document(n.id, n.text, path=n.path) for n in raw], raw_policy="editable")
    result = build_baseline("autocompaction", small, chunk_tokens=1000, executor="llm", max_chars=120,
                            max_new_tokens=24, **TINY)
    _valid(result, small)
    (summary,) = [n for n in result.workspace if n.kind == "synthetic"]
    assert summary.text and len(summary.text) <= 120 and set(summary.provenance) == {n.id for n in raw}


# ---- the untrained builder ---------------------------------------------------------------------------


@pytest.mark.slow
def test_untrained_builder_with_a_tiny_random_model_leaves_a_valid_store(flat) -> None:
    result = build_baseline("untrained_builder", flat, budget=3, max_new_tokens=24, **TINY)
    _valid(result, flat)
    info = result.info
    assert info["backend"].startswith("hf:tiny") and 1 <= info["actions"] <= 3 and info["tokens_generated"] > 0
    assert info["tool_errors"] >= 1  # random text is no valid call: errors cost actions, change nothing


def test_the_builder_role_applies_valid_ops_through_the_same_baseline(flat) -> None:
    result = build_baseline("untrained_builder", flat, budget=12, backend="scripted",
                            backend_args={"policy": "librarian_builder"})
    _valid(result, flat)
    assert result.ops > 0 and any(n.kind == "synthetic" for n in result.workspace)
    with pytest.raises(BaselineError, match="budget"):
        build_baseline("untrained_builder", flat, budget=0)
