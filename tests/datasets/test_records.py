"""Records: Arrow round trips, schema versions, workspace documents."""

from __future__ import annotations

import pyarrow as pa
import pytest

from librarian.datasets import (
    CORPUS_SCHEMA,
    Bundle,
    CorpusDoc,
    DatasetError,
    Question,
    flat_documents,
    read_parquet,
    to_documents,
    write_parquet,
)
from librarian.datasets.records import corpus_from_table, corpus_table, question_table, questions_from_table
from librarian.datasets.splits import take_balanced


def _bundle() -> Bundle:
    docs = [CorpusDoc("d1", "Ada lives in Port Avel.", "city:p1:Port Avel", "c1", source="city", title="Ada",
                      extra={"section": "Attributes"}),
            CorpusDoc("d2", "Bo's job is baker.", "job:p2:baker", "c2", path="facts/d2")]
    qs = [Question("q1", "Where does Ada live?", ["Port Avel"], "train", "QC1", "qc1_city", "c1", "set_f1",
                   support=["d1"], keys=["person:Ada"], extra={"slots": "{}"})]
    return Bundle("toy", docs, qs)


def test_round_trip_tables_and_parquet(tmp_path):
    b = _bundle()
    assert corpus_from_table(corpus_table(b.corpus)) == b.corpus
    assert questions_from_table(question_table(b.questions)) == b.questions
    write_parquet(b, tmp_path)
    back = read_parquet(tmp_path)
    assert back.corpus == b.corpus and back.questions == b.questions


def test_schema_version_is_checked():
    t = corpus_table(_bundle().corpus).replace_schema_metadata({b"librarian.schema_version": b"99"})
    with pytest.raises(DatasetError, match="schema version '99'"):
        corpus_from_table(t)
    bare = pa.table({"id": ["x"]}, schema=pa.schema([("id", pa.string())], metadata=CORPUS_SCHEMA.metadata))
    with pytest.raises(DatasetError, match="missing columns"):
        corpus_from_table(bare)


def test_unknown_metric_and_missing_folder(tmp_path):
    with pytest.raises(DatasetError, match="unknown metric"):
        Question("q", "?", [], "train", "c", "t", "k", metric="bleu")
    with pytest.raises(DatasetError, match="corpus.parquet"):
        read_parquet(tmp_path)


def test_to_documents_carries_origin_and_provenance():
    docs = to_documents(_bundle().corpus)
    assert [d.id for d in docs] == ["d1", "d2"]
    assert docs[0].origin == "city:p1:Port Avel" and docs[0].metadata["title"] == "Ada"
    assert docs[0].metadata["section"] == "Attributes" and docs[1].path == "facts/d2"
    assert [d.id for d in to_documents(_bundle().corpus, collection="c2")] == ["d2"]


def test_take_balanced_takes_classes_in_turn() -> None:
    qs = [Question(f"q{c}{i}", "?", ["a"], "train", f"QC{c}", "t", "kb") for c in (1, 2, 3) for i in range(4)]
    picked = take_balanced(qs, 5)
    assert [q.qclass for q in picked] == ["QC1", "QC2", "QC3", "QC1", "QC2"]
    assert take_balanced(qs, -1) == qs and take_balanced(qs, 99) == qs
    assert [q.id for q in qs][:2] == ["q10", "q11"]  # the input is not consumed


def test_flat_documents_put_every_corpus_document_at_facts_id_and_keep_its_text_and_provenance():
    docs = [CorpusDoc("d1", "Ada lives in Port Avel.", "city:p1:Port Avel", "c1", source="city", title="Ada"),
            CorpusDoc("d2", "Bo's job is baker.", "job:p2:baker", "c2", path="elsewhere/d2")]
    flat = flat_documents(docs)
    assert [(d.id, d.path, d.text) for d in flat] == [("d1", "facts/d1", "Ada lives in Port Avel."),
                                                      ("d2", "facts/d2", "Bo's job is baker.")]
    assert [d.origin for d in flat] == [d.origin for d in to_documents(docs)]
    assert flat[0].metadata["title"] == "Ada"
