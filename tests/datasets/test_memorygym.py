"""Memory-Gym: dated sessions and instances with exact answers and evidence."""

from __future__ import annotations

import re

import pytest

from librarian.datasets import DatasetError, to_documents
from librarian.datasets.memorygym import FAMILIES, MemoryGymConfig, build_memorygym, synthesize_history


@pytest.fixture(scope="module")
def mg():
    return build_memorygym(MemoryGymConfig(speakers=6, sessions=40, seed=1))


def test_deterministic_by_seed(mg):
    again = build_memorygym(MemoryGymConfig(speakers=6, sessions=40, seed=1))
    assert again.corpus == mg.corpus and again.questions == mg.questions
    other = build_memorygym(MemoryGymConfig(speakers=6, sessions=40, seed=2))
    assert [d.text for d in other.corpus] != [d.text for d in mg.corpus]


def test_one_document_per_dated_session(mg):
    assert len(mg.corpus) == 40
    dates = [d.extra["date"] for d in mg.corpus]
    assert dates == sorted(dates) and len(set(dates)) == 40
    docs = to_documents(mg.corpus)
    assert all(d.origin == d.id for d in docs)


def test_all_four_families_with_evidence_holding_the_answer(mg):
    assert {q.qclass for q in mg.questions} == set(FAMILIES)
    text = {d.id: d.text for d in mg.corpus}
    for q in mg.questions:
        assert q.support and all(s in text for s in q.support)
        if q.template == "su_job_changes":
            assert len(q.support) == int(q.answers[0])
            assert all("started working as" in text[s] for s in q.support)
        else:
            for a in q.answers:
                assert any(a in text[s] for s in q.support), (q.question, a)


def test_temporal_answers_follow_the_latest_mention():
    _, sessions, ledger = synthesize_history(MemoryGymConfig(seed=3))
    b = build_memorygym(MemoryGymConfig(seed=3))
    date_of = {d.id: d.extra["date"] for d in sessions}
    for q in b.questions:
        if q.template != "tt_city_on_date":
            continue
        person, day = re.match(r"Where was (.+) living on (\S+)\?", q.question).groups()
        said = [m for m in ledger if m.subject == person and m.attr == "city" and m.date.isoformat() <= day]
        assert said[-1].value == q.answers[0] and date_of[q.support[0]] == said[-1].date.isoformat()


def test_facts_change_and_repeat(mg):
    _, _, ledger = synthesize_history(MemoryGymConfig(speakers=6, sessions=40, seed=1))
    kinds = {m.kind for m in ledger}
    assert {"state", "change", "relation", "third"} <= kinds
    repeated = [k for k in {(m.subject, m.attr, m.value) for m in ledger if m.kind == "state"}
                if sum((m.subject, m.attr, m.value) == k for m in ledger) > 1]
    assert repeated


def test_bad_config():
    with pytest.raises(DatasetError, match="--speakers"):
        MemoryGymConfig(speakers=1)
