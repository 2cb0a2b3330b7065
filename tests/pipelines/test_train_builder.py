"""`librarian train_builder` end to end on local Ray with a tiny random model.

Four runs share one Ray session: A (3 steps, 2 rollout workers, the probe
pool, a rollout worker killed mid-batch at step 1), B (2 steps, checkpoints),
C (resumed from B's step-1 checkpoint for step 2) and D (B again, from the
warm start B saved). B matches A on steps 0 and 1 (the redone job is the
same work), C's step 2 matches A's and D's steps match B's.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from librarian.config import ConfigError, load_config
from librarian.learner import checkpoint, get_estimator
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.train import check, run
from librarian.pipelines.demo.rl import DEMO_PRESET, demo_config
from librarian.rewards.construction import fold_tokenless
from librarian.rl.trainer import saved_warm_start
from librarian.tracking import metric_history

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
BASE = ["rollout.options={model: tiny}", "rollout.cpus_per_worker=0.5", "ray.learner_cpus=0.5", "rollout.budget=3",
        "rollout.max_new_tokens=10", "rollout.torch_threads=1", "learner.batch_size=2", "learner.group_size=2",
        "learner.lora.rank=4", "learner.lora.alpha=8", "learner.lr=1e-3", "reward.every=1", "reward.max_probes=2",
        "reward.alpha=0.01", "sft.corpora=2", "sft.budget=10", "data.train_corpora=4", "data.exam_corpora=1",
        "rollout.hint_every=2", "probe.budget=4"]


RAY_CPUS = 4  # the `ray_session` fixture (tests/conftest.py)


def _run(args):
    return run(load_config(TrainBuilderConfig, BASE + args))


@pytest.fixture(scope="module")
def runs(ray_session, tmp_path_factory):
    root = tmp_path_factory.mktemp("tb")
    a = _run([f"out_dir={root / 'a'}", "steps=3", "rollout.workers=2", "probe.workers=1",
              "rollout.crash.jobs=[s1-b0-c2]", f"rollout.crash.marker_dir={root / 'markers'}",
              "checkpoint_every=1"])
    b = _run([f"out_dir={root / 'b'}", "steps=2", "rollout.workers=1", "probe.workers=0", "exam.enabled=false"])
    c = _run([f"out_dir={root / 'c'}", "steps=3", "rollout.workers=1", "probe.workers=0", "exam.enabled=false",
              f"resume={root / 'b' / 'checkpoints' / 'step_1'}"])
    d = _run([f"out_dir={root / 'd'}", "steps=2", "rollout.workers=1", "probe.workers=0", "exam.enabled=false",
              f"sft.init_from={root / 'b' / 'checkpoints' / 'sft'}"])
    return root, a, b, c, d


def _advantage_signal(run_dir):
    """Per step, the largest |advantage| the configured estimator gives that step's builds, recomputed from
    trajectories.jsonl (tokenless turns folded as `BuilderTask.turn_rewards` does; groups are jobs)."""
    import torch

    cfg = load_config(TrainBuilderConfig, BASE).learner
    builds: dict[int, list] = {}
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():
        r = json.loads(line)
        rewards = fold_tokenless([t["reward"] for t in r["turns"]], [t["tokens"] > 0 for t in r["turns"]])
        if rewards:
            builds.setdefault(r["step"], []).append((r["job"], rewards))
    signal = {}
    for step, bs in builds.items():
        adv, _ = get_estimator(cfg.advantage)(torch.tensor([x for _, rs in bs for x in rs], dtype=torch.float64),
                                              [k for k, (_, rs) in enumerate(bs) for _ in rs],
                                              [job for job, rs in bs for _ in rs], gamma=cfg.gamma,
                                              scale_by_std=cfg.scale_by_std)
        signal[step] = float(adv.abs().max())
    return signal


@pytest.mark.slow
def test_two_plus_steps_learn_on_ray(runs):
    """Every step updates the learner, and the policy gradient comes from the advantages only (kl_coef and
    entropy_coef are 0): a step gets a gradient exactly when its groups' builds differ. The tiny random
    model's builds within a group are often identical (same rewards turn by turn); then the advantages and
    the gradient are exactly 0 (a baseline pooled over all turns used to give them +-1 by turn position)."""
    root, a, *_ = runs
    assert a["grpo_steps"] == 3 and a["sft"]["sft_steps"] >= 1
    assert a["policy_version"] == a["sft"]["sft_steps"] + 3  # one version per update, SFT included
    signal = _advantage_signal(root / "a")
    assert sorted(signal) == [0, 1, 2]
    for h in a["history"]:
        assert math.isfinite(h["loss"]) and h["staleness"] == 0 and h["stale_dropped"] == 0 and h["samples"] > 0
        assert math.isfinite(h["grad_norm"]) and (h["grad_norm"] > 0) == (signal[int(h["step"])] > 0)
        if signal[int(h["step"])] == 0:
            assert h["pg_loss"] == 0 and h["grad_norm"] == 0
    if signal[1] > 0 or signal[2] > 0:  # a gradient in step 1 or 2 moves the adapter between the checkpoints
        w0 = checkpoint.read_tensor(root / "a" / "checkpoints" / "step_0", "weights")
        w2 = checkpoint.read_tensor(root / "a" / "checkpoints" / "step_2", "weights")
        assert any(not (w0[k] == w2[k]).all() for k in w0)
    assert {r["name"] for r in a["rows"]} == {"flat", "scripted_builder", "trained_builder"}
    assert (root / "a" / "report.html").is_file() and (root / "a" / "learning_curve.png").is_file()


@pytest.mark.slow
def test_killed_worker_loses_and_doubles_nothing(runs):
    root, a, b, *_ = runs
    assert a["rollout_failures"] == 1 and (root / "markers" / "crashed-s1-b0-c2").is_file()
    rows = [json.loads(line) for line in (root / "a" / "trajectories.jsonl").read_text().splitlines()]
    per_step = Counter(r["step"] for r in rows)
    assert per_step == {0: 4, 1: 4, 2: 4}  # batch 2 x group 2 each step
    assert len({(r["job"], r["index"]) for r in rows}) == len(rows)
    for x, y in zip(a["history"][:2], b["history"], strict=True):  # the redone job is the same work
        assert x["reward"] == pytest.approx(y["reward"]) and x["loss"] == pytest.approx(y["loss"], abs=1e-6)


@pytest.mark.slow
def test_rewards_sum_to_the_probe_gain_plus_the_final_score_per_build(runs):
    root, a, *_ = runs
    assert a["config"]["reward"]["terminal"] == "score"  # paper 000's default (`delta`: tests/rewards, tests/cluster)
    for line in (root / "a" / "trajectories.jsonl").read_text().splitlines():
        r = json.loads(line)
        actions = sum(t["actions"] for t in r["turns"])
        total = sum(t["reward"] for t in r["turns"])
        probes = r["probe_utilities"]
        last = probes[max(probes, key=int)] if probes else r["initial_utility"]
        # gamma 1: the probe deltas telescope to the last probe's gain, then + U(F_T) on the last turn
        assert total == pytest.approx(last - r["initial_utility"] - 0.01 * actions + r["final_utility"], abs=1e-9)


@pytest.mark.slow
def test_resume_after_step_two_matches_the_uninterrupted_run(runs):
    _, a, _, c, _ = runs
    assert c["first_step"] == 2 and c["grpo_steps"] == 1
    x, y = a["history"][2], c["history"][0]
    assert y["reward"] == pytest.approx(x["reward"])
    assert y["loss"] == pytest.approx(x["loss"], abs=1e-5) and y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-3)
    assert c["policy_version"] == a["policy_version"]


@pytest.mark.slow
def test_a_saved_warm_start_gives_the_run_that_fine_tuned(runs):
    """D loads the SFT checkpoint B wrote instead of fine-tuning: the same steps, and B's SFT figures."""
    root, _, b, _, d = runs
    assert d["sft"]["init_from"] == str(root / "b" / "checkpoints" / "sft")
    assert d["sft"]["sft_steps"] == b["sft"]["sft_steps"] and d["policy_version"] == b["policy_version"]
    for x, y in zip(b["history"], d["history"], strict=True):
        assert y["reward"] == pytest.approx(x["reward"]) and y["loss"] == pytest.approx(x["loss"], abs=1e-6)


@pytest.mark.slow
def test_init_from_refuses_a_folder_that_is_not_a_saved_warm_start(runs, tmp_path):
    root, *_ = runs
    assert saved_warm_start(str(root / "b" / "checkpoints" / "sft"))["sft_steps"] >= 1
    with pytest.raises(ConfigError, match="not a saved warm start"):
        saved_warm_start(str(root / "b" / "checkpoints" / "step_1"))
    with pytest.raises(ConfigError, match="sft.init_from: .* is not a learner checkpoint"):
        saved_warm_start(str(tmp_path))


@pytest.mark.slow
def test_mlflow_has_the_per_step_metrics(runs):
    from mlflow import MlflowClient

    _, a, *_ = runs
    client = MlflowClient(a["mlflow"]["tracking_uri"])
    assert [s for s, _ in metric_history(client, a["mlflow"]["run_id"], "loss")] == [0, 1, 2]
    assert metric_history(client, a["mlflow"]["run_id"], "rollout_turns_per_s")


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="did you mean 'rollout.workers'"):
        load_config(TrainBuilderConfig, ["rollout.worker=3"])
    with pytest.raises(ConfigError, match="learner.temperature"):
        check(load_config(TrainBuilderConfig, ["rollout.temperature=0.7"]))
    with pytest.raises(ConfigError, match="sft.init_from=x with sft.enabled=false"):
        load_config(TrainBuilderConfig, ["sft.enabled=false", "sft.init_from=x"])
    with pytest.raises(ConfigError, match="rollout.temperature must be > 0"):
        check(load_config(TrainBuilderConfig, ["rollout.temperature=0", "learner.temperature=1.0"]))


def _leaves(tree, prefix=""):
    """(dotted key, value) of every leaf of a nested dict (a non-empty dict is not a leaf)."""
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_presets_load():
    """Each shipped preset exists, passes `check`, and every value it sets is the value the run gets."""
    root = Path(__file__).resolve().parents[2] / "configs"
    defaults = OmegaConf.to_container(OmegaConf.structured(TrainBuilderConfig()))
    for name in ("train_builder.yaml", "demo.yaml", "cluster.yaml"):
        preset = OmegaConf.to_container(OmegaConf.load(root / name))
        cfg = load_config(TrainBuilderConfig, [f"config={root / name}"])
        check(cfg)
        loaded = OmegaConf.to_container(OmegaConf.structured(cfg))
        leaves = dict(_leaves(preset))
        assert leaves, name
        for key, value in leaves.items():
            assert OmegaConf.select(OmegaConf.create(loaded), key) == value, (name, key)
        changed = [k for k, v in leaves.items() if OmegaConf.select(OmegaConf.create(defaults), k) != v]
        assert changed, f"{name} sets nothing the defaults do not already have"


def test_demo_preset_matches_configs_demo_yaml():
    yaml = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
    assert OmegaConf.to_container(OmegaConf.load(yaml)) == DEMO_PRESET
    cfg = demo_config("x", {"steps": 4})
    check(cfg)
    assert cfg.out_dir == "x" and cfg.steps == 4 and cfg.rollout.options == {"model": "smollm2"}
