"""The official PhantomWiki generator, run for real, and its conversion."""

from __future__ import annotations

import json
import re

import pytest

from librarian.datasets import DatasetError
from librarian.datasets.phantomwiki import PWConfig, build_phantomwiki, convert
from librarian.datasets.scoring import pw_set_f1


@pytest.fixture(scope="module")
def pw(tmp_path_factory):
    work = tmp_path_factory.mktemp("pw")
    return work, build_phantomwiki(work, PWConfig())


def test_articles_become_sentence_documents_with_their_article(pw):
    work, b = pw
    articles = json.loads((work / "raw" / "articles.json").read_text())
    assert len({d.source for d in b.corpus}) == len(articles)
    by_title = {a["title"]: a["article"] for a in articles}
    for d in b.corpus:
        assert d.text in by_title[d.source] and not d.text.startswith("#")
        assert d.origin.startswith(d.source + "#")
    assert len({d.id for d in b.corpus}) == len(b.corpus)


def test_questions_keep_answers_and_metadata(pw):
    work, b = pw
    raw = {q["question"]: q for q in json.loads((work / "raw" / "questions.json").read_text())}
    for q in b.questions:
        src = raw[q.question]
        assert q.answers == [str(a) for a in src["answer"]]
        assert q.extra["difficulty"] == str(src["difficulty"]) and q.template == f"pw_t{src['type']}"
        assert q.extra["is_aggregation_question"] in ("true", "false") and q.metric == "pw_set_f1"
        assert pw_set_f1(", ".join(q.answers), q.answers).f1 == 1.0


def test_split_scheme_with_two_reserved_templates(pw):
    _, b = pw
    reserved = set(b.config["reserved_templates"])
    assert len(reserved) == 2
    for q in b.questions:
        out = q.split == "test_out" or q.extra.get("eval_part") == "out"
        assert (q.template in reserved) == out
    assert set(b.splits()) == {"train", "test_in", "test_out", "eval"}
    assert len({q.question for q in b.questions}) == len(b.questions)


def test_answers_are_stated_in_the_articles(pw):
    _, b = pw
    text = " ".join(d.text for d in b.corpus)
    for q in b.questions:
        if q.extra["is_aggregation_question"] == "false":
            for a in q.answers:
                assert re.search(re.escape(a), text), a


def test_missing_files_are_named(tmp_path):
    with pytest.raises(DatasetError, match="articles.json"):
        convert(tmp_path)
    (tmp_path / "articles.json").write_text("[]")
    (tmp_path / "questions.json").write_text('[{"id": "x"}]')
    with pytest.raises(DatasetError, match="lacks field 'question'"):
        convert(tmp_path)
