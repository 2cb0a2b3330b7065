"""The official PhantomWiki generator, run for real, and its conversion into atomic documents."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from librarian.datasets import DatasetError
from librarian.datasets.phantomwiki import PWConfig, build_phantomwiki, convert, query_keys
from librarian.datasets.phantomwiki_articles import singular_noun
from librarian.datasets.scoring import pw_set_f1

FACT = re.compile(r'^(\w+)\("(.*)", "(.*)"\)\.$')


@pytest.fixture(scope="module")
def pw(tmp_path_factory):
    work = tmp_path_factory.mktemp("pw")
    return work, build_phantomwiki(work, PWConfig())


def _raw(work, name):
    return json.loads((work / "raw" / name).read_text())


def test_one_document_per_fact_with_its_sentence_as_origin(pw):
    work, b = pw
    articles = {a["title"]: a for a in _raw(work, "articles.json")}
    facts = [f for a in articles.values() for f in a["facts"]]
    assert len(b.corpus) == len(facts) == len({d.extra["fact"] for d in b.corpus})  # every fact, once
    assert len({d.id for d in b.corpus}) == len(b.corpus) and {d.source for d in b.corpus} == set(articles)
    lists = 0
    for d in b.corpus:
        art = articles[d.source]
        pred, subj, obj = FACT.match(d.extra["fact"]).groups()
        assert d.extra["fact"] in art["facts"] and subj == d.source and d.extra["relation"] == pred
        assert d.extra["sentence"] in art["article"] and d.origin.startswith(d.source + "#")
        assert d.text.startswith("The ") and d.text.endswith(f" is {obj}.") and d.text.count(" is ") == 1
        assert obj in d.extra["sentence"] and not d.text.startswith("#")
        lists += " are " in d.extra["sentence"]
    assert lists > 20  # list sentences ("The friends of X are A, B.") were split
    by_origin = Counter(d.origin for d in b.corpus)
    sentences = sum(1 for a in articles.values() for line in a["article"].splitlines()
                    if line.strip() and not line.startswith("#"))
    assert len(by_origin) == sentences and max(by_origin.values()) > 1


def test_questions_keep_answers_and_metadata(pw):
    work, b = pw
    raw = {q["question"]: q for q in _raw(work, "questions.json")}
    for q in b.questions:
        src = raw[q.question]
        assert q.answers == [str(a) for a in src["answer"]]
        assert q.extra["difficulty"] == str(src["difficulty"]) and q.template == f"pw_t{src['type']}"
        assert q.extra["is_aggregation_question"] in ("true", "false") and q.metric == "pw_set_f1"
        assert pw_set_f1(", ".join(q.answers), q.answers).f1 == 1.0


def test_every_question_has_keys_including_aggregations(pw):
    _, b = pw
    assert all(q.keys for q in b.questions)
    for q in b.questions:
        if q.question.startswith("How many "):  # the counted relation is a key
            counted = re.search(r"aggregate_all\(count, distinct\((\w+)\(", q.extra["prolog_query"]).group(1)
            assert f"relation:{counted}" in q.keys, q.question
        named = re.findall(r"(?:of|does) ((?:[A-Z][a-z]+ )+?[A-Z][a-z]+)(?: have)?\?$", q.question)
        for name in named:
            assert f"person:{name}" in q.keys, q.question
    assert query_keys(['aggregate_all(count, distinct(niece("Ann Lee", Y_1)), Count_1)', 'dob(Y_2, "0254-07-10")']) \
        == ["relation:niece", "person:Ann Lee", "date:0254-07-10"]


def test_every_question_is_placed_and_splits_scale_with_the_universe(pw):
    work, b = pw
    assert len(b.questions) == len({q["question"] for q in _raw(work, "questions.json")}) == 80
    reserved = set(b.config["reserved_templates"])
    assert len(reserved) == 2
    for q in b.questions:
        out = q.split == "test_out" or q.extra.get("eval_part") == "out"
        assert (q.template in reserved) == out
    sizes = b.config["sizes"]
    counts = b.splits()
    assert counts == {"train": sizes["train"], "test_in": sizes["test_in"], "test_out": sizes["test_out"],
                      "eval": sizes["eval_in"] + sizes["eval_out"]}
    assert sizes["train"] + sizes["test_in"] + sizes["eval_in"] == 60  # six trained templates of ten
    assert sizes["train"] > sizes["test_in"] > sizes["eval_in"] > 0 and sizes["test_out"] > sizes["eval_out"] > 0
    assert abs(sizes["train"] / 60 - 150 / 270) < 0.02  # KBGym's 150:100:20 proportions


def test_answers_are_stated_in_the_articles(pw):
    _, b = pw
    text = " ".join(d.text for d in b.corpus)
    for q in b.questions:
        if q.extra["is_aggregation_question"] == "false":
            for a in q.answers:
                assert re.search(re.escape(a), text), a


def _write(tmp_path, articles, questions=()):
    (tmp_path / "articles.json").write_text(json.dumps(articles))
    (tmp_path / "questions.json").write_text(json.dumps(list(questions)))


QUESTIONS = [{"id": str(i), "question": f"Who is the person whose hobby is h{i}?", "answer": ["A B"],
              "template": ["Who is", "the person whose", "<attribute_name>_1", "is", "<attribute_value>_1", "?"],
              "type": i % 4, "difficulty": 1, "is_aggregation_question": False,
              "prolog": {"query": [f'hobby(Y_2, "h{i}")'], "answer": "Y_2"}} for i in range(12)]


def test_articles_without_facts_are_split_on_their_wording(tmp_path):
    article = "# A B\n\n## Family\nThe daughters of A B are C B, D B.\nThe husband of A B is E B.\n\n## Attributes\n" \
              "The hobby of A B is h1.\n"
    _write(tmp_path, [{"title": "A B", "article": article}], QUESTIONS)
    b = convert(tmp_path)
    assert [d.text for d in b.corpus] == ["The daughter of A B is C B.", "The daughter of A B is D B.",
                                          "The husband of A B is E B.", "The hobby of A B is h1."]
    assert [d.origin for d in b.corpus] == ["A B#0", "A B#0", "A B#1", "A B#2"]
    assert singular_noun("sisters-in-law") == "sister-in-law" and singular_noun("grandchildren") == "grandchild"


def test_missing_or_inconsistent_input_is_named(tmp_path):
    with pytest.raises(DatasetError, match="articles.json"):
        convert(tmp_path)
    (tmp_path / "articles.json").write_text("[]")
    (tmp_path / "questions.json").write_text('[{"id": "x"}]')
    with pytest.raises(DatasetError, match="lacks field 'question'"):
        convert(tmp_path)
    article = "# A B\n\n## Family\nThe sisters of A B are C B, D B.\n"
    _write(tmp_path, [{"title": "A B", "article": article, "facts": ['sister("A B", "C B").']}], QUESTIONS)
    with pytest.raises(DatasetError, match="does not state the facts"):
        convert(tmp_path)
    _write(tmp_path, [{"title": "A B", "article": article, "facts": ["sister(A B, C B)"]}], QUESTIONS)
    with pytest.raises(DatasetError, match="not pred"):
        convert(tmp_path)
    with pytest.raises(DatasetError, match="num_family_trees must be >= 1"):
        PWConfig(num_family_trees=0)
