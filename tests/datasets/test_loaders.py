"""The six public benchmark loaders, on tiny files written in their official formats."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from librarian.datasets import DatasetError
from librarian.datasets.loaders import (
    load_bright,
    load_browsecomp_plus,
    load_hotpotqa,
    load_locomo,
    load_longmemeval,
    load_narrativeqa,
)
from librarian.datasets.scoring import hotpot_sp, score

from .formats import (
    write_bright,
    write_browsecomp,
    write_hotpot,
    write_locomo,
    write_longmemeval,
    write_narrativeqa,
)


def test_locomo(tmp_path):
    b = load_locomo(write_locomo(tmp_path / "locomo10.json"))
    assert [d.id for d in b.corpus] == ["conv-1/session_1", "conv-1/session_2"]
    assert "shares a photo: a clay bowl" in b.corpus[0].text and "8 May, 2023" in b.corpus[0].text
    q = {x.template: x for x in b.questions}
    assert q["category_4"].support == ["conv-1/session_1"] and q["category_4"].qclass == "single-hop"
    assert q["category_1"].support == ["conv-1/session_1", "conv-1/session_2"]
    assert q["category_2"].answers == ["2023"]
    assert q["category_5"].extra["adversarial_answer"] == "Rex"
    assert score("locomo_f1", "pottery, fetch", q["category_1"].answers, category=1) == 1.0


def test_locomo_errors(tmp_path):
    with pytest.raises(DatasetError, match="locomo10.json"):
        load_locomo(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([{"sample_id": "x", "conversation": {"speaker_a": "a", "speaker_b": "b"},
                              "qa": [{"question": "?", "category": 4}]}]))
    with pytest.raises(DatasetError, match="missing field 'evidence'"):
        load_locomo(p)


def test_longmemeval(tmp_path):
    b = load_longmemeval(write_longmemeval(tmp_path / "longmemeval_s.json"))
    assert b.config["variant"] == "s"
    q1, q2 = b.questions
    assert q1.support == ["q1/answer_1"] and q1.docs == ["q1/s_a", "q1/answer_1"]
    assert q1.extra["abstention"] == "false" and q2.extra["abstention"] == "true"
    assert q2.template.endswith("_abs") and q2.metric == "judge"
    assert {d.collection for d in b.corpus} == {"q1", "q2_abs"}


def test_longmemeval_missing_field(tmp_path):
    p = tmp_path / "longmemeval_oracle.json"
    p.write_text(json.dumps([{"question_id": "q"}]))
    with pytest.raises(DatasetError, match="missing field 'question_type'.*haystack_sessions"):
        load_longmemeval(p)


def test_hotpotqa(tmp_path):
    b = load_hotpotqa(write_hotpot(tmp_path / "hotpot_dev_distractor_v1.json"))
    (q,) = b.questions
    assert q.support == [f"{q.id}/Bath", f"{q.id}/River Avon"] and len(q.docs) == 3
    sp = json.loads(q.extra["supporting_facts"])
    assert hotpot_sp(sp, [("River Avon", 0), ("Bath", 1)]).em == 1.0
    assert b.corpus[0].text == "The River Avon flows through Bath. It is long."
    shared = load_hotpotqa(tmp_path / "hotpot_dev_distractor_v1.json", shared=True)
    assert {d.collection for d in shared.corpus} == {"hotpotqa"}


def test_hotpotqa_bad_context(tmp_path):
    p = tmp_path / "h.json"
    p.write_text(json.dumps([{"_id": "1", "question": "?", "answer": "a", "supporting_facts": [],
                              "context": [["only title"]]}]))
    with pytest.raises(DatasetError, match=r"context 0: expected \[title, \[sentences\]\]"):
        load_hotpotqa(p)


def test_narrativeqa(tmp_path):
    root = write_narrativeqa(tmp_path / "narrativeqa")
    b = load_narrativeqa(root)
    (q,) = b.questions
    assert q.answers == ["a lamp", "the lamp"] and q.split == "train" and q.qclass == "gutenberg"
    assert [d.id for d in b.corpus] == ["0a1b/summary"]
    assert [d.id for d in load_narrativeqa(root, stories=True).corpus] == ["0a1b/summary", "0a1b/story"]
    assert score("squad_f1", "The lamp.", q.answers) == 1.0
    (root / "qaps.csv").unlink()
    with pytest.raises(DatasetError, match="qaps.csv: file not found"):
        load_narrativeqa(root)


def test_bright(tmp_path):
    root = write_bright(tmp_path / "BRIGHT")
    b = load_bright(root)
    (q,) = b.questions
    assert q.id == "biology/0" and q.support == ["biology/leaf_0.txt"] and q.metric == "judge"
    assert q.answers == ["Anthocyanins are made as chlorophyll fades."]
    assert json.loads(q.extra["excluded_ids"]) == []
    assert {d.id for d in b.corpus} == {"biology/leaf_0.txt", "biology/root_0.txt"}
    with pytest.raises(DatasetError, match="no file for domain 'aops'"):
        load_bright(root, domains=["aops"])


def test_bright_reference_answers_file(tmp_path):
    root = write_bright(tmp_path / "BRIGHT")
    pq.write_table(pa.Table.from_pylist([{"query": "q", "id": "0", "excluded_ids": [], "gold_ids": [],
                                          "gold_answer": "N/A"}]), root / "examples" / "biology-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match="no reference answer"):
        load_bright(root)
    (tmp_path / "ans.json").write_text(json.dumps({"0": "fixed answer"}))
    assert load_bright(root, answers_path=tmp_path / "ans.json").questions[0].answers == ["fixed answer"]


def test_browsecomp_plus(tmp_path):
    p = write_browsecomp(tmp_path / "browsecomp_plus_decrypted.jsonl")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"docid": "303", "text": "Unrelated.", "url": ""}) + "\n")
    b = load_browsecomp_plus(p, corpus_path=corpus)
    (q,) = b.questions
    assert q.support == ["101"] and q.docs == ["101", "202"] and q.answers == ["1932"]
    assert json.loads(q.extra["negative_docs"]) == ["202"]
    assert {d.id for d in b.corpus} == {"101", "202", "303"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query_id": "1", "query": "q", "answer": "a", "evidence_docs": [{"text": "x"}],
                               "gold_docs": [], "negative_docs": []}) + "\n")
    with pytest.raises(DatasetError, match=r"evidence_docs\[0\]: missing field 'docid'"):
        load_browsecomp_plus(bad)
