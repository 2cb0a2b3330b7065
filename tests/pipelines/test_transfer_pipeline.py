"""The transfer preset end to end on local Ray with a tiny random model: checked corpus sets, the warm-start gate,
GRPO, an exam with a keep set and sampled builds, the saved policy, and `librarian exam_builder` on it."""

from __future__ import annotations

import json
import os

import pytest

from librarian.config import load_config
from librarian.pipelines.builder import exam_saved
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.gate import WarmStartTooWeak
from librarian.pipelines.builder.train import EXAM_SAMPLES, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
PRESET = "configs/learning_builder_transfer.yaml"
TINY = ["rollout.backend=hf", "rollout.options={model: tiny}", "rollout.max_new_tokens=24", "rollout.torch_threads=1",
        "rollout.cpus_per_worker=0.5", "ray.learner_cpus=0.5", "probe.workers=0", "steps=1", "data.train_corpora=2", "data.train_order=[]",
        "sft.corpora=2", "data.val_corpora=2", "data.exam_corpora=2", "data.keep_corpora=1", "exam.samples=2",
        "sft.min_success=0", "learner.lora.rank=4", "learner.lora.alpha=8", "sft.gate_samples=2"]
RAY_CPUS = 4  # the `ray_session` fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def trained(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("transfer") / "run"
    return out, run(load_config(TrainBuilderConfig, [*TINY, f"out_dir={out}"], config_file=PRESET))


def test_a_run_reports_its_sets_gate_exam_rates_and_saves_its_policy(trained):
    out, results = trained
    sets = results["corpora"]
    assert [len(sets[k]) for k in ("train", "exam", "keep", "teacher", "gate")] == [2, 2, 1, 2, 2]
    assert all(sets["checks"][c]["flat"] < 1 <= sets["checks"][c]["scripted"] for c in sets["exam"] + sets["train"])
    assert results["gate"]["corpora"] == 2 and results["gate"]["builds"] == 4 and 0 <= results["gate"]["success"] <= 1
    rates = results["exam"]["rates"]
    assert rates["hard_corpora"] == 2 and rates["keep_corpora"] == 1
    assert rates["solve"]["scripted_builder"]["greedy"]["mean"] == 1.0 and rates["solve"]["flat"]["greedy"]["mean"] == 0
    assert rates["break"]["flat"]["sampled"]["mean"] == 0.0  # the flat store answers its own keep set
    assert rates["solve"]["trained_builder"]["sampled"]["builds"] == 4  # 2 hard corpora x 2 samples
    assert {"trained_builder-untrained_builder", "trained_builder-sft_builder"} <= set(rates["differences"])
    assert (out / "checkpoints" / "final" / "learner.json").is_file() == (results["final_checkpoint"] is not None)
    samples = (out / EXAM_SAMPLES).read_text().splitlines()
    assert len(samples) == 4 and {json.loads(s)["corpus"] for s in samples} == set(sets["exam"])
    assert "executed_call_rate" in results["history"][0]


def test_exam_builder_examines_the_saved_policy_on_another_universe(trained, tmp_path):
    out, results = trained
    cfg = exam_saved.load([f"checkpoint={results['final_checkpoint']}", "data.exam_seeds=[701]",
                           "data.exam_corpora=2", "data.keep_corpora=1", f"out_dir={tmp_path / 'exam'}",
                           "exam.untrained=false"])
    assert cfg.data.train_seeds == load_config(TrainBuilderConfig, TINY, config_file=PRESET).data.train_seeds
    exam = exam_saved.run(cfg)
    assert all(c.endswith(("@x701",)) or c.startswith(("x701", "k701")) for c in exam["corpora"]["exam"] + exam["corpora"]["keep"])
    assert exam["exam"]["rates"]["hard_corpora"] == 2 and (tmp_path / "exam" / "results.json").is_file()
    assert "untrained_builder" not in exam["exam"]["rates"]["solve"]


def test_exam_builder_refuses_a_folder_that_is_no_checkpoint(tmp_path):
    assert exam_saved.main([f"checkpoint={tmp_path}"]) == 2
    assert exam_saved.main([]) == 2


def test_grpo_waits_for_a_warm_start_that_succeeds_often_enough(trained, tmp_path):
    out, _ = trained
    cfg = load_config(TrainBuilderConfig, [*TINY, f"out_dir={tmp_path / 'gated'}", "sft.min_success=1.0",
                                           f"sft.init_from={out / 'checkpoints' / 'sft'}", "exam.enabled=false"],
                      config_file=PRESET)
    with pytest.raises(WarmStartTooWeak, match=r"below sft.min_success=1.0"):
        run(cfg)
    assert not (tmp_path / "gated" / "trajectories.jsonl").exists()  # no GRPO step ran
