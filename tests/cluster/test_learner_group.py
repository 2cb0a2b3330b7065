"""A learner group of 2 ranks on a real local Ray (gloo on CPU) against one learner actor on the whole batch.

The torch engine and DeepSpeed ZeRO-2 and ZeRO-3 must give the same loss and,
after one step, the same weights as one `LearnerActor`; a checkpoint written
by 2 ranks resumes in 2 fresh ranks to the same next step; a killed rank fails
the step naming it, and `recover()` resumes from the last checkpoint.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from librarian.cluster import topology
from librarian.cluster.learner_group import LearnerGroup, LearnerGroupError
from librarian.cluster.learner_start import start_learner
from librarian.learner import DeepSpeedConfig, LearnerConfig, LearnerError, LoraConfig
from tests.learner.conftest import random_samples

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path("build/torch_extensions").resolve()))
pytestmark = pytest.mark.slow  # each rank imports torch, transformers, peft, verl (and DeepSpeed) at start

BACKEND, OPTIONS = "hf", {"model": "tiny"}
TOL = 1e-5
MEASURED: dict[str, float] = {}  # the max abs weight differences, printed at the end of the module


def config(engine: str = "torch", workers: int = 2, stage: int = 2) -> LearnerConfig:
    return LearnerConfig(engine=engine, lr=1e-2, lora=LoraConfig(rank=4, alpha=8), grad_accum=2, workers=workers,
                         deepspeed=DeepSpeedConfig(zero_stage=stage))


BATCH_A, BATCH_B = random_samples(8, seed=0), random_samples(8, seed=1)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
    print("\n2 ranks vs 1 learner, max abs differences (weights; *_loss: loss):", MEASURED)


def start(cfg: LearnerConfig):
    """A learner (group) through the pipelines' entry point, in a placement group of its own."""
    topo = topology.Topology(topology.RayConfig(learner_cpus=1), topology.Resources(0.1), 1)
    topo.reserve()
    return start_learner(topo, BACKEND, OPTIONS, cfg, 1), topo


def weights(learner) -> dict:
    import ray

    version, ref = ray.get(learner.publish.remote())
    return ray.get(ref).state


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def single(ray_session):
    """One `LearnerActor` (learner.workers 1): step on A, step on B, then SFT on A; metrics and weights after each."""
    ray = ray_session
    learner, topo = start(config(workers=1))
    out = {"a": ray.get(learner.step.remote(BATCH_A)), "wa": weights(learner),
           "b": ray.get(learner.step.remote(BATCH_B)), "wb": weights(learner),
           "sft": ray.get(learner.sft.remote(BATCH_A, 1, 4, 0)), "wsft": weights(learner)}
    assert ray.get(learner.version.remote()) == 4
    ray.kill(learner)
    topo.release()
    return out


def test_torch_group_matches_one_learner_and_a_killed_rank_recovers(ray_session, single, tmp_path):
    ray = ray_session
    group, topo = start(config("torch"))
    try:
        assert len(set(ray.get(group.pids.remote()))) == 2
        with pytest.raises(LearnerGroupError, match="cannot be split over 2 learner ranks"):
            ray.get(group.step.remote(BATCH_A[:1]))  # refused before any rank starts: the group stays usable

        first = ray.get(group.step.remote(BATCH_A))
        MEASURED["torch_loss"] = abs(first["loss"] - single["a"]["loss"])
        assert first["loss"] == pytest.approx(single["a"]["loss"], rel=1e-6, abs=1e-7)
        assert first["grad_norm"] == pytest.approx(single["a"]["grad_norm"], rel=1e-5)
        assert first["trained_tokens"] == single["a"]["trained_tokens"] and first["version"] == 1
        MEASURED["torch"] = max_diff(weights(group), single["wa"])
        assert MEASURED["torch"] < TOL
        ckpt = ray.get(group.save.remote(str(tmp_path / "step_0"), {"step": 0}))
        second = ray.get(group.step.remote(BATCH_B))
        after_second = weights(group)
        assert max_diff(after_second, single["wb"]) < TOL

        ray.kill(ray.get(group.rank_handles.remote())[1])
        with pytest.raises(LearnerGroupError, match="learner rank 1 of 2 failed during step: its process died"):
            ray.get(group.step.remote(BATCH_B))
        with pytest.raises(LearnerGroupError, match="stopped .*call recover"):
            ray.get(group.publish.remote())

        assert ray.get(group.recover.remote()) == {"step": 0}  # fresh ranks from the last checkpoint
        assert ray.get(group.version.remote()) == 1 and Path(ckpt, "rng_rank1.pt").is_file()
        again = ray.get(group.step.remote(BATCH_B))
        assert again["loss"] == pytest.approx(second["loss"], rel=1e-6, abs=1e-7)
        MEASURED["torch_resume"] = max_diff(weights(group), after_second)
        assert MEASURED["torch_resume"] < 1e-6

        sft = ray.get(group.sft.remote(BATCH_A, 1, 4, 0))
        assert [m["sft_loss"] for m in sft] == pytest.approx([m["sft_loss"] for m in single["sft"]], rel=1e-5)
        MEASURED["torch_sft"] = max_diff(weights(group), single["wsft"])
        assert MEASURED["torch_sft"] < TOL
    finally:
        ray.kill(group)
        topo.release()


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_group_matches_one_learner_and_resumes(stage, ray_session, single, tmp_path):
    ray = ray_session
    group, topo = start(config("deepspeed", stage=stage))
    try:
        first = ray.get(group.step.remote(BATCH_A))
        MEASURED[f"zero{stage}_loss"] = abs(first["loss"] - single["a"]["loss"])
        assert first["loss"] == pytest.approx(single["a"]["loss"], rel=1e-5)
        assert first["grad_norm"] == pytest.approx(single["a"]["grad_norm"], rel=1e-4)
        MEASURED[f"zero{stage}"] = max_diff(weights(group), single["wa"])  # ZeRO-3: gathered on publish
        assert MEASURED[f"zero{stage}"] < TOL
        if stage == 2:  # 3 samples, grad_accum 2, 2 ranks: one sample a rank is enough (1 + 2 micro-batches, evened)
            short = ray.get(group.step.remote(BATCH_B[:3]))
            assert short["version"] == 2 and short["loss"] == short["loss"]  # ran, and the loss is a number
            assert short["trained_tokens"] == sum(sum(s.loss_mask[1:]) for s in BATCH_B[:3])  # every sample, once
            return
        ckpt = Path(ray.get(group.save.remote(str(tmp_path / "step_0"), {"step": 0})))
        shards = sorted(p.name for p in (ckpt / "deepspeed" / "state").glob("*optim_states.pt"))
        assert len(shards) == 2, shards  # each rank's partition of the optimizer state
        second = ray.get(group.step.remote(BATCH_B))
        after_second = weights(group)
        assert ray.get(group.recover.remote()) == {"step": 0}  # 2 fresh ranks load the 2-rank checkpoint
        again = ray.get(group.step.remote(BATCH_B))
        assert again["loss"] == pytest.approx(second["loss"], rel=1e-6, abs=1e-7)
        MEASURED["zero3_resume"] = max_diff(weights(group), after_second)
        assert MEASURED["zero3_resume"] < 1e-6
    finally:
        ray.kill(group)
        topo.release()


def test_bad_group_settings_are_named():
    with pytest.raises(LearnerError, match="learner.workers must be >= 1"):
        config(workers=0)
    with pytest.raises(LearnerGroupError, match="at least 2 ranks"):
        LearnerGroup(BACKEND, OPTIONS, config(), 1, [{"num_cpus": 1}])
