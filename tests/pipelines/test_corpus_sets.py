"""The transfer preset's corpus sets: every set from universes of its own, each corpus checked for headroom (the
flat store misses, the SFT teacher solves) or, for the keep set, answered by the flat store."""

from __future__ import annotations

import pytest

from librarian.config import load_config
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.corpora import CorpusError
from librarian.pipelines.builder.corpus_sets import corpus_sets
from librarian.pipelines.builder.headroom import check_corpora

PRESET = "configs/learning_builder_transfer.yaml"
SMALL = ["data.train_corpora=4", "data.train_order=[]", "sft.corpora=4", "data.val_corpora=2", "data.exam_corpora=4", "data.keep_corpora=3"]


def small(*extra: str) -> TrainBuilderConfig:
    return load_config(TrainBuilderConfig, [*SMALL, *extra], config_file=PRESET)


@pytest.fixture(scope="module")
def sets():
    return corpus_sets(small())


def test_every_set_has_its_size_and_comes_from_its_own_universes(sets):
    sizes = {name: len(getattr(sets, name)) for name in ("train", "teacher", "gate", "exam", "keep")}
    assert sizes == {"train": 4, "teacher": 4, "gate": 2, "exam": 4, "keep": 3}
    tags = {name: {q.id.rsplit("@", 1)[1] for c in getattr(sets, name) for q in c.questions}
            for name in ("train", "teacher", "gate", "exam", "keep")}
    cfg = small()
    assert {t[1:] for t in tags["train"]} <= {str(s) for s in cfg.data.train_seeds}
    assert {t[1:] for t in tags["exam"] | tags["keep"]} <= {str(s) for s in cfg.data.exam_seeds}
    assert not {t[1:] for t in tags["train"] | tags["teacher"]} & {t[1:] for t in tags["exam"] | tags["gate"]}


def test_hard_corpora_are_missed_by_the_flat_store_and_solved_by_the_teacher(sets):
    for name in ("train", "teacher", "gate", "exam"):
        for c in getattr(sets, name):
            check = sets.checks[c.corpus_id]
            assert check.flat < 1.0 and check.scripted == 1.0 and check.headroom, (name, c.corpus_id)
    assert all(sets.checks[c.corpus_id].answered for c in sets.keep)
    again = check_corpora(small(), sets.exam[:2])  # deterministic: the same verdicts on a second look
    assert {k: (v.flat, v.scripted) for k, v in again.items()} == {
        c.corpus_id: (sets.checks[c.corpus_id].flat, sets.checks[c.corpus_id].scripted) for c in sets.exam[:2]}


def test_sets_that_share_a_universe_or_run_short_are_refused_by_name():
    with pytest.raises(CorpusError, match="data.train_seeds and data.exam_seeds share universes"):
        corpus_sets(small("data.exam_seeds=[301]"))
    with pytest.raises(CorpusError, match=r"data.exam_corpora: .* fewer than the 500 asked for"):
        corpus_sets(small("data.exam_corpora=500"))
    with pytest.raises(CorpusError, match="name them in data.val_seeds"):
        corpus_sets(small("data.val_seeds=[]"))
