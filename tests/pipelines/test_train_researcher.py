"""`librarian train_researcher` end to end on local Ray with a tiny random model.

One run (through `main` and the `--config FILE` spelling) on a Memory-Gym
history of 80 sessions: verified SFT from the scripted teacher, two
hint-guided GRPO steps (1 question x 2 trajectories, tool calls under the
tools' grammar), then the scripted researcher on the hierarchical and flat
stores and the trained policy.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from librarian.config import ConfigError, load_config
from librarian.learner import checkpoint
from librarian.pipelines.researcher.config import TrainResearcherConfig
from librarian.pipelines.researcher.train import check, main
from librarian.tracking import metric_history

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SMALL = """
steps: 2
data: {speakers: 6, sessions: 80, seed: 1, test_fraction: 0.3, train_questions: 6, test_questions: 12}
ray: {learner_cpus: 0.5}
search: {embedder: hashing}
rollout: {options: {model: tiny}, workers: 1, cpus_per_worker: 0.5, budget: 2, max_new_tokens: 8,
          torch_threads: 1, hint_every: 1}
learner: {batch_size: 1, group_size: 2, lr: 1.0e-3, grad_accum: 4, lora: {rank: 4, alpha: 8}}
sft: {questions: 4, budget: 8, max_tokens: 1024, batch_size: 2}
eval: {arms: [hierarchical, flat], n_boot: 200, batch_size: 8, trained_budget: 2, trained_questions: 3,
       embedder: hashing}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import ray

    root = tmp_path_factory.mktemp("tr")
    (root / "small.yaml").write_text(SMALL, encoding="utf-8")
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    try:
        code = main(["--config", str(CONFIGS / "researcher_memorygym.yaml"), f"--config={root / 'small.yaml'}",
                     f"out_dir={root / 'out'}"])
    finally:
        ray.shutdown()
    assert code == 0
    return root / "out", json.loads((root / "out" / "results.json").read_text())


@pytest.mark.slow
def test_results_have_the_headline_figures_and_plots(run):
    out, r = run
    for key in ("source_recall_hierarchical", "source_recall_flat", "source_recall_hierarchical_ci",
                "source_recall_flat_ci", "sft_steps", "grpo_steps", "trained", "history", "runtime"):
        assert key in r, key
    low, high = r["source_recall_flat_ci"]
    assert low <= r["source_recall_flat"] <= high
    assert r["trained"]["n"] == 3 and r["trained"]["hints"] == 0  # evaluation never hints
    assert set(r["runtime"]) == {"hierarchical", "flat"} and r["runtime"]["hierarchical"]["construction_s"] > 0
    for name in ("arms.png", "reward_curve.png", "results.md", "evaluation.json", "config.yaml"):
        assert (out / name).is_file(), name


@pytest.mark.slow
def test_sft_then_configured_grpo_steps_move_the_weights(run):
    out, r = run
    assert r["sft"]["verified"] >= 1 and r["sft_steps"] > 0 and r["sft"]["clipped"] >= 1
    assert r["grpo_steps"] == 2 and [h["step"] for h in r["history"]] == [0.0, 1.0]
    assert r["policy_version"] == r["sft_steps"] + 2
    norms = r["trainable_norm"]
    assert norms["initial"] != norms["after_sft"]
    assert all("valid_call_rate" in h and "nonzero_advantage_fraction" in h for h in r["history"])
    w0 = checkpoint.read_tensor(out / "checkpoints" / "step_0", "weights")
    w1 = checkpoint.read_tensor(out / "checkpoints" / "step_1", "weights")
    moved = any(not (w0[k] == w1[k]).all() for k in w0)
    # GRPO moves the adapter exactly when some group had a reward signal. Without one (the tiny random model
    # usually cites nothing: every reward 0) the advantages are 0, the KL term and its gradient are 0 at the
    # reference (the SFT policy itself) and SFT reset the optimizer moments, so the weights stay put.
    signal = any(h["nonzero_advantage_fraction"] > 0 for h in r["history"])
    assert moved == signal and (norms["after_sft"] != norms["final"]) == signal


@pytest.mark.slow
def test_hierarchical_store_recalls_at_least_the_flat_store(run):
    _, r = run
    assert r["source_recall_hierarchical"] >= r["source_recall_flat"]
    assert r["hierarchical_minus_flat"] == pytest.approx(r["source_recall_hierarchical"] - r["source_recall_flat"])


@pytest.mark.slow
def test_training_trajectories_are_hinted_and_logged_to_mlflow(run):
    from mlflow import MlflowClient

    out, r = run
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 and all(row["hints"] >= 1 for row in rows)
    assert all(0.0 <= row["reward"] <= 1.0 for row in rows)
    client = MlflowClient(r["mlflow"]["tracking_uri"])
    assert [s for s, _ in metric_history(client, r["mlflow"]["run_id"], "reward")] == [0, 1]
    assert metric_history(client, r["mlflow"]["run_id"], "trainable_norm")


def test_config_errors_name_the_key(capsys):
    with pytest.raises(ConfigError, match="did you mean 'rollout.workers'"):
        load_config(TrainResearcherConfig, ["rollout.worker=3"])
    assert main(["rollout.budgt=3"]) == 2 and "rollout.budget" in capsys.readouterr().err
    assert main(["learner.lr=-1"]) == 2 and "learner.lr must be >= 0" in capsys.readouterr().err
    check(load_config(TrainResearcherConfig, ["learner.lr=0", "sft.lr=1e-4"]))  # a learning benchmark's control
    check(load_config(TrainResearcherConfig, ["rollout.max_calls_per_turn=2", "sft.enabled=false"]))
    for args, match in ((["rollout.temperature=0.7"], "learner.temperature"),
                        (["search.mode=fuzzy"], "search.mode"), (["eval.arms=[hierarchical, flatt]"], "flatt"),
                        (["learner.advantage=ppo"], "learner.advantage"), (["sft.judge=human"], "sft.judge"),
                        (["data.test_fraction=0"], "data.test_fraction"), (["sft.max_tokens=1"], "sft.max_tokens"),
                        (["sft.lr=-1"], "sft.lr"), (["data.grpo_questions=-1"], "data.grpo_questions"), (["rollout.max_calls_per_turn=2"], "rollout.max_calls_per_turn")):
        with pytest.raises(ConfigError, match=match):
            check(load_config(TrainResearcherConfig, args))


def test_presets_load():
    check(load_config(TrainResearcherConfig, ["--config", str(CONFIGS / "researcher_memorygym.yaml")]))
    cluster = load_config(TrainResearcherConfig, [f"config={CONFIGS / 'researcher_memorygym.yaml'}",
                                                  f"config={CONFIGS / 'researcher_cluster.yaml'}"])
    check(cluster)
    assert cluster.rollout.backend == "vllm" and cluster.learner.engine == "deepspeed"
    learning = load_config(TrainResearcherConfig, ["--config", str(CONFIGS / "researcher_learning.yaml")])
    check(learning)
    assert learning.rollout.constrained and learning.rollout.free_text and learning.steps == 12
    fast = load_config(TrainResearcherConfig, ["--config", str(CONFIGS / "researcher_learning_fast.yaml")])
    check(fast)  # the slow preset's task and SFT on the fast step: vLLM, a KL term beside the shared opening
    assert (fast.data, fast.sft, fast.rollout.budget) == (replace(learning.data, grpo_questions=4), learning.sft,
                                                          learning.rollout.budget)
    assert fast.rollout.backend == "vllm" and fast.learner.shared_prefix and fast.learner.loss.kl_coef > 0
    assert fast.learner.batch_size * fast.learner.group_size == 16
    assert TrainResearcherConfig().rollout.constrained and TrainResearcherConfig().sft.lr == 0.0
