"""Corpus and question inputs; extractive builders (pure extraction, deterministic plans, shard invariance)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.app import builders
from librarian.app.corpus import InputError, corpus_kind, load_documents, load_questions
from librarian.workspace import Document, Workspace
from librarian.workspace.ops import MAX_LINK_MANY_TARGETS


def test_folder_corpus_skips_hidden_files(notes: Path) -> None:
    docs = load_documents(notes)
    assert corpus_kind(notes) == "folder"
    assert [d.path for d in docs] == ["people.md", "trips/lisbon.md", "trips/porto.txt"]


def test_jsonl_corpus_and_its_errors(tmp_path: Path) -> None:
    good = tmp_path / "docs.jsonl"
    good.write_text('{"id": "a", "text": "Alpha"}\n\n{"id": "b", "text": "Beta", "path": "x/b"}\n')
    docs = load_documents(good)
    assert [(d.id, d.path) for d in docs] == [("a", None), ("b", "x/b")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n')
    with pytest.raises(InputError, match="needs a string 'text'"):
        load_documents(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(InputError, match="broken.jsonl:1: not JSON"):
        load_documents(broken)
    with pytest.raises(InputError, match="is not a folder"):
        load_documents(tmp_path / "missing.csv")


def test_dataset_corpus_and_questions(kb200: Path) -> None:
    docs = load_documents(kb200)
    assert corpus_kind(kb200) == "dataset" and len(docs) > 1000
    assert all(d.path.startswith("facts/") for d in docs)
    qs = load_questions(kb200, split="test_in")
    assert qs and all(q.split == "test_in" and q.answers and q.metric == "set_f1" for q in qs)


def test_questions_from_text_jsonl_and_stdin(tmp_path: Path) -> None:
    txt = tmp_path / "q.txt"
    txt.write_text("Who is Ada?\n\nWhere is Lisbon?\n")
    assert [q.question for q in load_questions(txt)] == ["Who is Ada?", "Where is Lisbon?"]
    jl = tmp_path / "q.jsonl"
    jl.write_text(json.dumps({"id": "x", "question": "Q?", "answers": "A", "metric": "squad_f1"}) + "\n")
    (item,) = load_questions(jl)
    assert (item.id, item.answers) == ("x", ("A",))
    items = load_questions("-", lines=io.StringIO('plain question\n{"question": "json one", "answers": ["y"]}\n'))
    assert [(q.question, q.answers) for q in items] == [("plain question", ()), ("json one", ("y",))]
    with pytest.raises(InputError, match="no questions"):
        load_questions("-", lines=["", "  "])


def test_kbgym_keys_parse_fact_sentences() -> None:
    assert builders.kbgym_keys("Ada Moss lives in Port Avel.") == [("person", "Ada Moss"), ("city", "Port Avel")]
    assert builders.kbgym_keys("Ada Moss's mother is Eve Moss.") == [("person", "Ada Moss"), ("person", "Eve Moss")]
    assert builders.kbgym_keys("An index of residents") == []


def test_entity_keys_drop_sentence_words() -> None:
    keys = builders.entity_keys("In May, Ada Moss flew to Lisbon. The Harbor Labs team")
    assert ("entity", "Ada Moss") in keys and ("entity", "Lisbon") in keys and ("entity", "Harbor Labs") in keys
    assert all(v not in ("In", "The", "May") for _, v in keys)


def test_plan_ops_link_in_chunks_and_apply_cleanly() -> None:
    members = [f"d{i}" for i in range(95)]
    table = {("city", "Port Avel"): members, ("job", "baker"): ["d1"]}
    ops = builders.plan_ops(table)
    link_many = [op for op in ops if op.name == "link_many"]
    assert all(len(op.targets) <= MAX_LINK_MANY_TARGETS for op in link_many)
    assert sum(len(op.targets) for op in link_many if op.source == "indexes/city/port-avel") == 95

    ws = Workspace.from_documents([Document(m, f"fact {m}") for m in members])
    for op in ops:
        ws.apply(op)
    node = ws.by_path("indexes/city/port-avel")
    assert node is not None and node.text == "Residents of Port Avel" and len(node.links) == 95
    assert builders.plan_ops(table) == ops  # deterministic


def test_entities_keep_names_in_two_documents(notes: Path) -> None:
    docs = load_documents(notes)
    table = builders.extract_shard("entities", [(d.id, d.text) for d in docs])
    ops = builders.plan_ops(table, builders.default_options("entities"))
    paths = {op.path for op in ops if op.name == "add"}
    assert paths == {"entities/ada-moss.md", "entities/ben-hale.md", "entities/harbor-labs.md", "entities/lisbon.md"}


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.sampled_from(["Ada Moss lives in Port Avel.", "Ben Hale's job is baker.",
                                       "Ada Moss's friend is Ben Hale.", "no facts here"]), max_size=30),
       n=st.integers(1, 8))
def test_sharded_extraction_equals_one_pass(texts: list[str], n: int) -> None:
    docs = [(f"d{i}", t) for i, t in enumerate(texts)]
    shards = builders.shards_of(docs, n)
    assert [d for s in shards for d in s] == docs
    merged = builders.merge_tables(builders.extract_shard("kbgym_keys", s) for s in shards)
    assert merged == builders.extract_shard("kbgym_keys", docs)
