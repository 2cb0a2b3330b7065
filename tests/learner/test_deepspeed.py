"""The DeepSpeed engine on CPU/gloo (one rank): ZeRO-2 and ZeRO-3 updates equal the torch engine's."""

from __future__ import annotations

import json
import shutil

import pytest

from librarian.learner import DeepSpeedConfig, Learner, LearnerConfig, LearnerError, LoraConfig
from librarian.learner.deepspeed_engine import ds_config
from librarian.learner.sft import fine_tune
from tests.learner.conftest import random_samples, tiny_model

pytestmark = pytest.mark.slow  # DeepSpeed start-up; its shm op is JIT-built once into build/torch_extensions


def config(engine: str, stage: int = 2) -> LearnerConfig:
    return LearnerConfig(engine=engine, lr=1e-2, lora=LoraConfig(rank=4, alpha=8), grad_accum=2,
                         deepspeed=DeepSpeedConfig(zero_stage=stage))


@pytest.fixture(scope="module")
def reference(pad_id):
    learner = Learner(tiny_model(0), config("torch"), pad_id)
    metrics = [learner.step(random_samples(4, seed=s)) for s in (0, 1)]
    return metrics, learner.publish_weights()[1].state


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_steps_match_the_torch_engine_and_resume(stage, pad_id, reference, tmp_path):
    want_metrics, want_state = reference
    learner = Learner(tiny_model(0), config("deepspeed", stage), pad_id)
    first = learner.step(random_samples(4, seed=0))
    assert first["loss"] == pytest.approx(want_metrics[0]["loss"], rel=1e-5)
    assert first["grad_norm"] == pytest.approx(want_metrics[0]["grad_norm"], rel=1e-4)
    folder = learner.save(tmp_path / "ckpt", extra={"data_position": 1})
    assert (folder / "deepspeed").is_dir()
    assert json.loads((folder / "learner.json").read_text())["world_size"] == 1
    resumed = Learner(tiny_model(0), config("deepspeed", stage), pad_id)
    # ZeRO partitions the optimizer state by the number of ranks: a checkpoint of 2 ranks does not fit 1
    other = shutil.copytree(folder, tmp_path / "two_ranks")
    header = json.loads((other / "learner.json").read_text())
    (other / "learner.json").write_text(json.dumps({**header, "world_size": 2}))
    with pytest.raises(LearnerError, match="written by 2 DeepSpeed learner ranks.*learner.workers=2"):
        resumed.load(other)
    assert resumed.load(folder) == {"data_position": 1}
    resumed.step(random_samples(4, seed=1))
    version, payload = resumed.publish_weights()  # ZeRO-3 differs from torch by ~5e-6 even unresumed
    assert version == 2
    for k, v in payload.state.items():
        assert float((v - want_state[k]).abs().max()) < 2e-5, (k, float((v - want_state[k]).abs().max()))


def test_bf16_section_and_float32_master_weights(pad_id):
    """`precision: bf16`: DeepSpeed's bf16 section; the module computes in bf16 while the ZeRO optimizer's
    float32 master partition takes the update (lr 1e-6 moves it; the bf16 copy of such weights cannot)."""
    import torch

    cfg = LearnerConfig(engine="deepspeed", lr=1e-6, lora=LoraConfig(enabled=False), precision="bf16")
    assert ds_config(cfg)["bf16"] == {"enabled": True} and "bf16" not in ds_config(LearnerConfig())
    learner = Learner(tiny_model(0), cfg, pad_id)
    assert {p.dtype for p in learner.engine.ds.module.parameters()} == {torch.bfloat16}
    masters = learner.engine.ds.optimizer.single_partition_of_fp32_groups
    assert masters and all(m.dtype == torch.float32 for m in masters)
    before = [m.detach().clone() for m in masters]
    learner.step(random_samples(4))
    moved = max(float((m - b).abs().max()) for m, b in zip(masters, before, strict=True))
    assert 1e-7 < moved < 1e-5


def test_sft_with_a_short_last_batch_and_a_token_budget_match_the_torch_engine(pad_id):
    """5 samples in batches of 2 (the last has 1, fewer than grad_accum) and a GRPO step whose token budget
    makes 3 micro-batches: DeepSpeed runs both and agrees with the torch engine."""
    samples = random_samples(5, seed=2)
    runs = {}
    for engine in ("torch", "deepspeed"):
        cfg = LearnerConfig(engine=engine, lr=1e-2, lora=LoraConfig(rank=4, alpha=8), grad_accum=2,
                            max_tokens_per_micro_batch=0, deepspeed=DeepSpeedConfig(zero_stage=2))
        learner = Learner(tiny_model(0), cfg, pad_id)
        history = fine_tune(learner, samples, epochs=1, batch_size=2, progress=False, freeze_reference=False)
        learner.cfg.max_tokens_per_micro_batch = 20  # samples of 11, 10, 9, 9 tokens: [11], [10, 9], [9]
        assert len(learner.micro_batches(random_samples(4, seed=3))) == 3
        step = learner.step(random_samples(4, seed=3))
        runs[engine] = ([h["sft_loss"] for h in history], step, learner.publish_weights()[1].state)
    (t_sft, t_step, t_state), (d_sft, d_step, d_state) = runs["torch"], runs["deepspeed"]
    assert len(d_sft) == 3 and d_sft == pytest.approx(t_sft, rel=1e-5)
    assert d_step["loss"] == pytest.approx(t_step["loss"], rel=1e-5)
    assert max(float((d_state[k] - t_state[k]).abs().max()) for k in t_state) < 1e-5
