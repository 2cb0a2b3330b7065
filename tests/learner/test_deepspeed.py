"""The DeepSpeed engine on CPU/gloo (one rank): ZeRO-2 and ZeRO-3 updates equal the torch engine's."""

from __future__ import annotations

import pytest

from librarian.learner import DeepSpeedConfig, Learner, LearnerConfig, LoraConfig
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
    resumed = Learner(tiny_model(0), config("deepspeed", stage), pad_id)
    assert resumed.load(folder) == {"data_position": 1}
    resumed.step(random_samples(4, seed=1))
    version, payload = resumed.publish_weights()  # ZeRO-3 differs from torch by ~5e-6 even unresumed
    assert version == 2
    for k, v in payload.state.items():
        assert float((v - want_state[k]).abs().max()) < 2e-5, (k, float((v - want_state[k]).abs().max()))
