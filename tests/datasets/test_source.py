"""`data.source`: kbgym | phantomwiki | path, one loader for every pipeline."""

from __future__ import annotations

import pytest

from librarian.datasets import DatasetError, write_parquet
from librarian.datasets.records import Bundle
from librarian.datasets.source import (
    SourceConfig,
    load_documents_and_questions,
    load_source,
    require_splits,
)


def test_kbgym_source_keeps_the_universe_for_gradient_groups():
    src = load_source(SourceConfig(), people=80, seed=3)
    assert src.kbgym is not None and src.name == "kbgym" and not src.is_phantomwiki
    assert src.scripted_policies == ("kbgym_reader", "kbgym_curator")
    assert {q.split for q in src.questions} == {"train", "test_in", "test_out", "eval"}
    assert len(src.split("train")) == 150 and src.describe().startswith(f"kbgym: {len(src.corpus)} documents")


def test_phantomwiki_source_runs_the_generator_with_the_configured_options(tmp_path):
    data = SourceConfig(source="phantomwiki", num_family_trees=1, max_family_tree_size=20, num_questions_per_type=5,
                      question_depth=8)
    src = load_source(data, seed=2, work_dir=tmp_path)
    assert (tmp_path / "phantomwiki" / "raw" / "articles.json").is_file()
    assert src.is_phantomwiki and src.scripted_policies == ("phantom_reader", "phantom_curator")
    assert src.config["question_depth"] == 8 and src.config["seed"] == 2 and src.config["num_family_trees"] == 1
    assert len({q.template for q in src.questions}) == 14  # depth 8 has fourteen templates, depth 6 eight
    assert all(q.split for q in src.questions) and len(src.questions) == 70
    # a `librarian data` folder of it reads back as the same documents and questions
    write_parquet(Bundle("pw", src.corpus, src.questions), tmp_path / "folder")
    docs, questions = load_documents_and_questions(SourceConfig(source="path", path=str(tmp_path / "folder")))
    assert [d.text for d in docs] == [d.text for d in src.corpus] and questions == src.questions


def test_bad_sources_are_named(tmp_path):
    with pytest.raises(DatasetError, match="data.source must be one of kbgym, phantomwiki, path"):
        load_source(SourceConfig(source="kbgim"))
    with pytest.raises(DatasetError, match="needs data.path"):
        load_source(SourceConfig(source="path"))
    with pytest.raises(DatasetError, match="no such folder"):
        load_source(SourceConfig(source="path", path=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="corpus.parquet: not found"):
        load_source(SourceConfig(source="path", path=str(tmp_path / "empty")))
    with pytest.raises(DatasetError, match="question_depth must be 0"):
        load_source(SourceConfig(source="phantomwiki", question_depth=2))
    src = load_source(SourceConfig(), people=80, seed=3)
    with pytest.raises(DatasetError, match=r"no questions in split\(s\) \['dev'\]"):
        require_splits(src, ["train", "dev"])
