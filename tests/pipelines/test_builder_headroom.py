"""The builder task with headroom (configs/learning_builder.yaml): corpora options and scripted > flat."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from librarian.config import load_config
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.models.scripted.kbgym import StatedFact, parse_fact
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.corpora import (
    CorpusError,
    make_corpora,
    ordered_corpora,
    sft_corpora,
    task_corpora,
    teacher_corpora,
)
from librarian.rl.task import rotation

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "learning_builder.yaml"
KINDS = ("qc4_city_count", "qc9_oldest_in_city", "QC6")


@pytest.fixture(scope="module")
def kbgym():
    return build_kbgym(people=150, seed=1, sizes=SplitSizes(train=120, test_in=150, test_out=10, eval_in=10,
                                                            eval_out=10))


def test_make_corpora_options_give_the_kinds_sizes_and_paths_asked_for(kbgym):
    corpora = make_corpora(kbgym, 3, questions=2, docs=120, splits=("train",), seed=1, prefix="c", max_support=60,
                           question_kinds=KINDS, min_support=4, path_style="sentence")
    assert [c.corpus_id for c in corpora] == ["c0", "c1", "c2"]
    for c in corpora:
        assert len(c.docs) == 120 and len(c.questions) == 2
        ids = {d.id for d in c.docs}
        for q in c.questions:
            assert q.template in KINDS or q.qclass in KINDS
            assert len(q.support) >= 4 and set(q.support) <= ids
        for d in c.docs:
            assert d.path.startswith(f"facts/{d.id} ") and parse_fact(d.path.split(" ", 1)[1]) == parse_fact(d.text)
    plain = make_corpora(kbgym, 1, questions=2, docs=10, splits=("train",), seed=1, prefix="p")[0]
    assert all(d.path == f"facts/{d.id}" for d in plain.docs)  # the old signature and layout
    with pytest.raises(CorpusError, match="kinds qc4_city_count"):
        make_corpora(kbgym, 50, questions=2, docs=120, splits=("train",), seed=1, prefix="c", max_support=60,
                     question_kinds=("qc4_city_count",))
    top = make_corpora(kbgym, 1, questions=1, docs=16, splits=("train",), seed=1, prefix="t", max_support=13,
                       question_kinds=("qc4_city_count",), min_support=6, path_style="top")[0]
    assert len(top.docs) == 16 and all("/" not in d.path and d.path.startswith(f"{d.id} ") for d in top.docs)
    with pytest.raises(CorpusError, match="path_style"):
        make_corpora(kbgym, 1, questions=1, docs=120, splits=("train",), seed=1, prefix="c", max_support=60,
                     path_style="pretty")


def reads_top_level_citations() -> bool:
    """Whether the scripted reader reads a fact back from a line the extractive executor wrote for a top-level
    source (`<id> <sentence>: <sentence>`, no `/` in the path)."""
    return parse_fact("kb1 Ada Lind lives in Ivywick: Ada Lind lives in Ivywick.") == StatedFact("Ada Lind", "city", "Ivywick")


def test_the_preset_builds_its_task_and_the_compact_scripted_builder_beats_the_flat_store():
    spec = importlib.util.spec_from_file_location("builder_headroom", ROOT / "benchmarks" / "builder_headroom.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # type: ignore[union-attr]

    cfg = load_config(TrainBuilderConfig, ["data.exam_corpora=12", "data.train_corpora=2"], config_file=PRESET)
    assert cfg.probe.role == "kbgym" and cfg.probe.backend == "scripted" and cfg.probe.budget == 3
    assert cfg.rollout.budget <= 5 and cfg.exam.scripted_budget <= 5 and cfg.sft.teacher == "librarian_builder_compact"
    assert cfg.rollout.constrained and cfg.rollout.content_executor == "extractive"
    _, train, exam = task_corpora(cfg.data)
    assert len(train) == 2 and len(exam) == 12
    assert all(len(c.docs) == cfg.data.docs_per_corpus <= cfg.rollout.listing_lines for c in train + exam)
    assert not {q.id for c in train for q in c.questions} & {q.id for c in exam for q in c.questions}
    assert reads_top_level_citations(), "the scripted reader must read index files the content executor wrote"
    res = bench.measure(cfg, exam, n_boot=500)
    assert res["exam_questions"] == 12
    assert set(res["build_ends_scripted"]) <= {"done", "budget"}  # an index's merge may take the last action
    assert res["build_actions_scripted"] <= cfg.exam.scripted_budget
    low, _high = res["exam_scripted_minus_flat_ci"]
    assert low > 0  # the scripted builder beats the flat store, CI over questions excludes zero
    assert 0.2 <= res["exam_utility_flat"] <= res["exam_utility_scripted"] - 0.1  # headroom on both sides
    assert res["exam_utility_random"] <= res["exam_utility_flat"] + 0.05  # files without a plan do not help


def test_training_corpora_can_come_from_another_world_with_their_own_minimum_support():
    base = ["data.people=200", "data.train_corpora=3", "data.exam_corpora=4", "data.max_support=13",
            "data.min_support=6", "data.questions_per_corpus=1", "data.docs_per_corpus=16",
            "data.question_kinds=[qc4_city_count,qc4_job_count]",
            "data.split_sizes={train: 60, test_in: 250, test_out: 0, eval_in: 40, eval_out: 0}"]
    same = task_corpora(load_config(TrainBuilderConfig, base).data)
    other = task_corpora(load_config(TrainBuilderConfig, [*base, "data.train_seed=3", "data.train_min_support=11"]).data)
    assert [len(q.support) >= 11 for c in other[1] for q in c.questions] == [True] * 3
    assert any(len(q.support) < 11 for c in same[1] for q in c.questions)  # the option changed the draw
    exam_ids = [(c.corpus_id, [q.id for q in c.questions], [d.id for d in c.docs]) for c in same[2]]
    assert exam_ids == [(c.corpus_id, [q.id for q in c.questions], [d.id for d in c.docs]) for c in other[2]]
    assert not {q.id for c in other[1] for q in c.questions} & {q.id for c in other[2] for q in c.questions}
    assert all(q.id.endswith("@w3") for c in other[1] for q in c.questions)


def test_sft_corpora_come_from_further_worlds_with_every_group_size_and_never_from_the_exam_world():
    base = ["data.people=200", "data.train_corpora=3", "data.exam_corpora=4", "data.max_support=13",
            "data.min_support=6", "data.questions_per_corpus=1", "data.docs_per_corpus=16",
            "data.question_kinds=[qc4_city_count,qc4_job_count]", "data.train_seed=3", "data.train_min_support=11",
            "data.split_sizes={train: 60, test_in: 250, test_out: 0, eval_in: 40, eval_out: 0}"]
    assert sft_corpora(load_config(TrainBuilderConfig, base).data, 10) == []  # no seeds: training corpora only
    data = load_config(TrainBuilderConfig, [*base, "data.sft_seeds=[4,5]", "data.train_min_support=0"]).data
    teacher = sft_corpora(data, 30)
    assert len(teacher) == 30 and len({c.corpus_id for c in teacher}) == 30
    sizes = [len(q.support) for c in teacher for q in c.questions]
    assert min(sizes) < 11 <= max(sizes) and all(6 <= n <= 13 for n in sizes)  # easy and hard groups alike
    hard = sft_corpora(load_config(TrainBuilderConfig, [*base, "data.sft_seeds=[4,5]"]).data, 30)
    assert 10 <= len(hard) < 30  # as many as the two worlds hold
    assert all(len(q.support) >= 11 for c in hard for q in c.questions)  # drawn as the training corpora are
    seeds = [q.id.rsplit("@s", 1)[1] for c in teacher for q in c.questions]
    assert seeds[0] == "4" and seeds[-1] == "5" and seeds == sorted(seeds)  # the first world before the next
    assert len(sft_corpora(data, 5)) == 5
    _, train, exam = task_corpora(data)
    chosen = teacher_corpora(data, train, 5)  # the training corpora first, then the other worlds'
    assert [c.corpus_id for c in chosen] == [c.corpus_id for c in train] + [c.corpus_id for c in teacher[:2]]
    assert [c.corpus_id for c in teacher_corpora(data, train, 2)] == [c.corpus_id for c in train[:2]]
    ids = {q.id for c in teacher for q in c.questions}
    assert not ids & {q.id for c in train + exam for q in c.questions}
    with pytest.raises(CorpusError, match="sft_seeds holds the exam's universe 1"):
        sft_corpora(load_config(TrainBuilderConfig, [*base, "data.sft_seeds=[1]"]).data, 3)


def test_training_corpora_from_many_worlds_take_turns_and_are_never_revisited_in_a_run():
    base = ["data.people=200", "data.exam_corpora=4", "data.max_support=13", "data.min_support=6",
            "data.questions_per_corpus=1", "data.docs_per_corpus=16", "data.train_min_support=11",
            "data.question_kinds=[qc4_city_count,qc4_job_count]",
            "data.split_sizes={train: 60, test_in: 250, test_out: 0, eval_in: 40, eval_out: 0}"]
    data = load_config(TrainBuilderConfig, [*base, "data.train_corpora=9", "data.train_seeds=[3,4,5]"]).data
    _, train, exam = task_corpora(data)
    worlds = [c.corpus_id.split("-")[0] for c in train]
    assert worlds == ["w3", "w4", "w5"] * 3  # one corpus of each universe in turn
    assert len({c.corpus_id for c in train}) == 9
    questions = [q.id for c in train for q in c.questions]
    assert len(set(questions)) == 9 and not set(questions) & {q.id for c in exam for q in c.questions}
    assert all(len(q.support) >= 11 for c in train for q in c.questions)  # drawn with the training minimum
    # a step's corpora are (step x batch + b) mod train_corpora: 9 corpora cover 9 steps of one without a repeat
    assert len({c.corpus_id for s in range(9) for _, c in rotation(train, s, 1)}) == 9
    with pytest.raises(CorpusError, match="train_seeds holds the exam's universe 1"):
        task_corpora(load_config(TrainBuilderConfig, [*base, "data.train_corpora=2", "data.train_seeds=[3,1]"]).data)
    with pytest.raises(CorpusError, match=r"hold \d+ training corpora, fewer than data.train_corpora=500"):
        task_corpora(load_config(TrainBuilderConfig, [*base, "data.train_corpora=500", "data.train_seeds=[3]"]).data)


def test_the_powered_preset_trains_on_fresh_corpora_with_the_exams_group_sizes():
    cfg = load_config(TrainBuilderConfig, [], config_file=ROOT / "configs" / "learning_builder_powered.yaml")
    _, train, exam = task_corpora(cfg.data)
    per_step = [c.corpus_id for s in range(cfg.steps) for _, c in rotation(train, s, cfg.learner.batch_size)]
    assert len(per_step) == len(set(per_step)) == cfg.steps * cfg.learner.batch_size  # never revisited
    assert len({c.corpus_id.split("-")[0] for c in train}) == len(cfg.data.train_seeds) >= 6
    sizes = {"train": [len(q.support) for c in train for q in c.questions],
             "exam": [len(q.support) for c in exam for q in c.questions]}
    assert min(sizes["train"]) == min(sizes["exam"]) == 6 and max(sizes["train"]) == max(sizes["exam"]) == 13
    assert cfg.learner.group_size >= 8 and cfg.steps >= 24


def test_the_matched_preset_revisits_only_its_first_corpora_at_the_end_and_never_warms_up_on_them():
    cfg = load_config(TrainBuilderConfig, [], config_file=ROOT / "configs" / "learning_builder_matched.yaml")
    _, train, exam = task_corpora(cfg.data)
    per_step = [c.corpus_id for s in range(cfg.steps) for _, c in rotation(train, s, cfg.learner.batch_size)]
    ends = 3  # learning_curves.ENDS: the reward gain's window at each end
    assert per_step[-ends:] == per_step[:ends]  # the gain compares the same corpora before and after
    assert len(set(per_step[:-ends])) == cfg.steps - ends  # every other step trains on a fresh corpus
    teacher = teacher_corpora(cfg.data, train, cfg.sft.corpora)
    assert len(teacher) == cfg.sft.corpora
    questions = {q.id for c in teacher for q in c.questions}
    assert not questions & {q.id for c in train + exam for q in c.questions}


def test_a_warm_start_kept_off_the_training_corpora_needs_universes_of_its_own():
    base = ["data.people=200", "data.train_corpora=2", "data.exam_corpora=2", "data.max_support=13",
            "data.min_support=6", "data.questions_per_corpus=1", "data.docs_per_corpus=16", "data.train_seeds=[3]",
            "data.question_kinds=[qc4_city_count,qc4_job_count]", "data.sft_from_train=false",
            "data.split_sizes={train: 60, test_in: 250, test_out: 0, eval_in: 40, eval_out: 0}"]
    data = load_config(TrainBuilderConfig, base).data
    _, train, _ = task_corpora(data)
    with pytest.raises(CorpusError, match="sft_from_train=false .* data.sft_seeds, which is empty"):
        teacher_corpora(data, train, 2)
    assert teacher_corpora(data, train, 0) == []
    with_seeds = load_config(TrainBuilderConfig, [*base, "data.sft_seeds=[4]"]).data
    chosen = teacher_corpora(with_seeds, train, 2)
    assert len(chosen) == 2 and all(q.id.endswith("@s4") for c in chosen for q in c.questions)


def test_a_train_order_puts_the_named_corpora_in_rotation_and_refuses_names_it_does_not_have(kbgym):
    made = make_corpora(kbgym, 4, questions=1, docs=10, splits=("train",), seed=1, prefix="c")
    order = ["c2", "c0", "c2"]
    chosen = ordered_corpora(made, order)
    assert [c.corpus_id for c in chosen] == order and chosen[0] is made[2]
    assert [c.corpus_id for s in range(5) for _, c in rotation(chosen, s, 1)] == ["c2", "c0", "c2", "c2", "c0"]
    assert ordered_corpora(made, []) == made
    with pytest.raises(CorpusError, match=r"train_order names 'c9', not among the 4 training corpora \(c0 .. c3\)"):
        ordered_corpora(made, ["c1", "c9"])


def test_the_revisit_preset_measures_six_corpora_before_any_update_and_after_eighteen():
    cfg = load_config(TrainBuilderConfig, [], config_file=ROOT / "configs" / "learning_builder_revisit.yaml")
    _, train, exam = task_corpora(cfg.data)
    per_step = [c.corpus_id for s in range(cfg.steps) for _, c in rotation(train, s, cfg.learner.batch_size)]
    ends = 6  # the preset's --ends
    assert per_step[-ends:] == per_step[:ends] == per_step[12:18]  # the same six corpora at both ends
    assert len(set(per_step[:ends])) == ends and not set(per_step[ends:12]) & set(per_step[:ends])
    assert len({c.split("-")[0] for c in per_step}) == len(cfg.data.train_seeds)  # every universe trains
    assert cfg.seed != 0  # seed 0's control chose the six corpora: its samples stay out of the test
    teacher = teacher_corpora(cfg.data, train, cfg.sft.corpora)
    assert not {q.id for c in teacher for q in c.questions} & {q.id for c in train + exam for q in c.questions}
