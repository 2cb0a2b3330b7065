"""`rollout.asynchronous`: rollouts one step ahead of the learner, on local Ray with a tiny random model.

One `train_builder` run of 3 steps: step t+1's builds are generated on the
weights published before update t (one update stale when trained on), the
stale filter keeps them (max_staleness 1) and reports it, and the loss is the
truncated-IS correction (`learner.loss.rollout_is: token`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict

import pytest

from librarian.config import load_config
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.train import run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
pytestmark = pytest.mark.slow

ARGS = ["rollout.options={model: tiny}", "rollout.cpus_per_worker=0.5", "ray.learner_cpus=0.5", "rollout.budget=3",
        "rollout.max_new_tokens=10", "rollout.torch_threads=1", "rollout.workers=2", "learner.batch_size=2",
        "learner.group_size=2", "learner.lora.rank=4", "learner.lora.alpha=8", "learner.lr=1e-3", "reward.every=1",
        "reward.max_probes=1", "reward.alpha=0.01", "probe.workers=0", "probe.budget=2", "sft.enabled=false",
        "exam.enabled=false", "data.train_corpora=4", "data.exam_corpora=1", "steps=3", "checkpoint_every=0",
        "rollout.asynchronous=true", "learner.loss.rollout_is=token"]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    import ray

    out = tmp_path_factory.mktemp("async")
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    try:
        return out, run(load_config(TrainBuilderConfig, [*ARGS, f"out_dir={out}"]))
    finally:
        ray.shutdown()


def test_rollouts_run_one_update_behind_and_staleness_is_reported_per_step(result):
    out, r = result
    versions = defaultdict(set)
    for line in (out / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        versions[row["step"]].add(row["policy_version"])
    # no SFT: the first publish is version 0; step 1's builds started before update 0 ended, step 2's before update 1
    assert dict(versions) == {0: {0}, 1: {0}, 2: {1}}
    h = r["history"]
    assert [x["staleness_max"] for x in h] == [0.0, 1.0, 1.0] and all(x["stale_dropped"] == 0 for x in h)
    assert [x["staleness"] for x in h] == [0.0, 1.0, 1.0]  # the learner's own count agrees
    assert r["policy_version"] == 3 and r["grpo_steps"] == 3


def test_the_update_is_importance_weighted_against_the_rollout_log_probs(result):
    _, r = result
    for x in r["history"]:
        assert 0.0 <= x["learner_idle_fraction"] <= 1.0 and x["step_s"] > 0 and x["rollout_s"] > 0
        assert x["rollout_is_max"] <= 2.0 + 1e-6 and x["rollout_is_mean"] > 0  # TIS weights, truncated at 2
