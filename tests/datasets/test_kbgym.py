"""KBGym: determinism, independent gold re-derivation, supports, splits, gradient groups."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from librarian.datasets import DatasetError, to_documents, write_parquet
from librarian.datasets.kbgym import CLASSES, TEMPLATES, SplitSizes, build_kbgym
from librarian.datasets.kbgym.build import instance_question
from librarian.datasets.kbgym.gradient import GROUPS, gradient_groups, two_slot_templates
from librarian.datasets.kbgym.universe import MAX_KEY_SIZE
from librarian.datasets.kbgym.verify import verify


def test_same_seed_same_bytes(tmp_path, kb500):
    other = build_kbgym(500, 1)
    write_parquet(kb500.bundle, tmp_path / "a")
    write_parquet(other.bundle, tmp_path / "b")
    for name in ("corpus.parquet", "questions.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_other_seed_other_universe(kb500):
    other = build_kbgym(500, 2)
    assert [d.text for d in other.corpus] != [d.text for d in kb500.corpus]


def test_paper_scale_counts(kb500):
    b = kb500.bundle
    assert 5600 <= len(b.corpus) <= 6200
    assert b.splits() == {"train": 150, "test_in": 100, "test_out": 50, "eval": 30}
    assert len(TEMPLATES) == 26 and {t.qclass for t in TEMPLATES} == set(CLASSES)
    assert {q.qclass for q in b.questions} == set(CLASSES)
    assert len({q.template for q in b.questions}) == 26


def test_documents_are_atomic_sentences_with_origins(kb500):
    origins = [d.origin for d in kb500.corpus]
    assert len(set(origins)) == len(origins)
    for d in kb500.corpus[:500]:
        assert d.text.endswith(".") and d.text.count(". ") == 0
    docs = to_documents(kb500.corpus)
    assert all(isinstance(d.origin, str) and d.origin for d in docs)


def test_every_gold_rederived_for_the_splits(kb500):
    assert verify(kb500.corpus, kb500.bundle.questions) == []


def test_every_pool_instance_rederived_for_every_class(kb500):
    qclass = {t.name: t.qclass for t in TEMPLATES}
    qs = [instance_question(i, f"x{n}", "pool", "", name, qclass[name])
          for name, pool in kb500.pools.items() for n, i in enumerate(pool)]
    assert {q.qclass for q in qs} == set(CLASSES)
    assert verify(kb500.corpus, qs) == []


@pytest.mark.parametrize("template", [t.name for t in TEMPLATES])
def test_verifier_catches_a_wrong_gold(kb500, template):
    q = next(q for q in kb500.bundle.questions if q.template == template)
    wrong = replace(q, answers=[*q.answers, "Nobody Atall"])
    assert any("brute force gives" in p for p in verify(kb500.corpus, [wrong]))


def test_verifier_catches_missing_evidence(kb500):
    q = next(q for q in kb500.bundle.questions if q.template == "qc3_rel_rel_job")
    broken = replace(q, support=q.support[1:])
    assert any("support lacks evidence" in p for p in verify(kb500.corpus, [broken]))


def test_support_sentences_name_the_answers(kb500):
    text = {d.id: d.text for d in kb500.corpus}
    for q in kb500.bundle.questions:
        if q.qclass in ("QC4", "QC5", "QC8"):
            continue  # counts and abstentions: the answer is not a name in the text
        for a in q.answers:
            assert any(a in text[s] for s in q.support), (q.id, a)


def test_splits_are_instance_disjoint(kb500):
    qs = kb500.bundle.questions
    instances = Counter((q.template, q.extra["slots"]) for q in qs)
    assert max(instances.values()) == 1
    assert len({q.id for q in qs}) == len(qs)
    assert len({q.question for q in qs}) == len(qs)


def test_test_out_uses_one_reserved_template_per_class(kb500):
    reserved = {t.name for t in TEMPLATES if t.reserved}
    assert len(reserved) == 10 and len({t.qclass for t in TEMPLATES if t.reserved}) == 10
    for q in kb500.bundle.questions:
        if q.split == "test_out" or q.extra.get("eval_part") == "out":
            assert q.template in reserved
        else:
            assert q.template not in reserved


def test_name_distractors_share_first_names(kb500):
    firsts = Counter(p.first for p in kb500.universe.people.values())
    names = {p.name for p in kb500.universe.people.values()}
    assert len(names) == len(kb500.universe.people)
    for q in kb500.bundle.questions:
        for k in q.keys:
            if k.startswith("person:"):
                assert firsts[k.split(":", 1)[1].split()[0]] >= 2


def test_keys_fit_link_many_and_birthdates_are_distinct(kb500):
    people = list(kb500.universe.people.values())
    for attr in ("city", "job", "hobby"):
        assert max(Counter(getattr(p, attr) for p in people).values()) <= MAX_KEY_SIZE
    assert len({p.birthdate for p in people}) == len(people)


def test_too_small_pools_fail_clearly():
    with pytest.raises(DatasetError, match="instances but the splits need"):
        build_kbgym(60, 1, SplitSizes(train=1500))
    with pytest.raises(DatasetError, match="--people"):
        build_kbgym(10, 1)


def test_gradient_groups_follow_key_coverage(kb500):
    groups = gradient_groups(kb500, n=30, seed=1)
    assert set(groups) == set(GROUPS) and all(len(v) == 30 for v in groups.values())
    covered = {k for q in kb500.bundle.split("train") for k in json.loads(q.extra["slot_keys"])}
    in_splits = {(q.template, q.extra["slots"]) for q in kb500.bundle.questions}
    expect = {"both": 2, "one": 1, "neither": 0}
    for group, want in expect.items():
        for q in groups[group]:
            keys = json.loads(q.extra["slot_keys"])
            assert len(keys) == 2 and sum(k in covered for k in keys) == want
            assert (q.template, q.extra["slots"]) not in in_splits
            assert q.template in two_slot_templates()
    train_ids = {q.id for q in kb500.bundle.split("train")}
    assert {q.id for q in groups["trained"]} <= train_ids
    assert verify(kb500.corpus, [q for g in groups.values() for q in g]) == []
