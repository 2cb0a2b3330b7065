"""Exams in the plain loop: grading, repeats, caching by snapshot, and the comparison with the flat store."""

from __future__ import annotations

from dataclasses import replace

import pytest

from librarian.datasets import to_documents
from librarian.datasets.kbgym.build import build_kbgym
from librarian.evaluation.baselines import build_baseline
from librarian.evaluation.exam import compare, summarize
from librarian.rewards.probe_exam import (
    ExamError,
    ExamRunner,
    ReaderSpec,
    run_local,
    snapshot_bytes,
    snapshot_key,
)
from librarian.search.factory import SearchConfig
from librarian.workspace import SnapshotView, Workspace


@pytest.fixture(scope="module")
def kb():
    return build_kbgym(people=80, seed=3)


@pytest.fixture(scope="module")
def flat(kb) -> Workspace:
    return Workspace.from_documents([replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)],
                                    raw_policy="editable")


@pytest.fixture(scope="module")
def questions(kb):
    return kb.bundle.split("test_in")[::4]  # every class


def test_the_scripted_reader_is_graded_per_question(flat, questions) -> None:
    results = run_local(flat, questions, ReaderSpec())
    assert [r.qid for r in results] == [q.id for q in questions]
    assert all(0.0 <= r.f1 <= 1.0 and 1 <= r.actions <= 15 for r in results)
    assert summarize(results)["f1"] > 0.8  # the scripted reader answers KBGym from the flat store
    assert all(r.tokens_read > 0 and r.end == "answer" for r in results)


def test_every_input_form_gives_the_same_exam(flat, questions) -> None:
    spec = ReaderSpec()
    runner = ExamRunner(spec)
    a = run_local(flat, questions, spec, runner=runner)
    b = run_local(SnapshotView.from_ipc_bytes(snapshot_bytes(flat)), questions, spec, runner=runner)
    c = run_local(snapshot_bytes(flat), questions, spec, runner=runner, chunk=5)
    assert a == b == c
    assert len(runner._stores) == 1  # one snapshot content, opened once


def test_repeats_keep_positions_and_the_hub_store_reads_more_and_acts_less(flat, questions) -> None:
    spec = ReaderSpec()
    rep = run_local(flat, questions[:5], spec, repeats=3)
    assert [(r.qid, r.repeat) for r in rep] == [(q.id, k) for q in questions[:5] for k in range(3)]
    hubs = build_baseline("hipporag", flat).workspace
    flat_r = run_local(flat, questions, spec)
    hub_r = run_local(hubs, questions, spec)
    cmp = compare(hub_r, flat_r, n_boot=300)
    assert cmp["rho"] == pytest.approx(sum(r.actions for r in hub_r) / sum(r.actions for r in flat_r))
    assert cmp["rho_ci"][0] <= cmp["rho"] <= cmp["rho_ci"][1]
    assert cmp["f1_ci"][0] <= cmp["f1"] <= cmp["f1_ci"][1]
    assert summarize(hub_r)["synthetic_read"] > 0 and cmp["rho"] < 1.0
    self_cmp = compare(flat_r, flat_r, n_boot=100)
    assert self_cmp["rho"] == 1.0 and self_cmp["f1_delta"] == 0.0


def test_bad_requests_are_named(flat, questions) -> None:
    with pytest.raises(ExamError, match="lacks questions"):
        compare(run_local(flat, questions[:3], ReaderSpec()), run_local(flat, questions[3:5], ReaderSpec()))
    with pytest.raises(ExamError, match="reader role"):
        ReaderSpec(role="oracle").check()
    with pytest.raises(ExamError, match="needs an embedder"):
        ReaderSpec(search_mode="hybrid", search=SearchConfig(embedder="none")).check()
    with pytest.raises(ExamError, match="not loaded"):
        ExamRunner(ReaderSpec()).run(snapshot_key(snapshot_bytes(flat)), [])
    with pytest.raises(ExamError, match="repeats"):
        run_local(flat, questions, ReaderSpec(), repeats=0)
