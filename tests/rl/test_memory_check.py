"""Memory is checked before a job starts, not only in `librarian plan`: `RLConfig.check` refuses a GPU learner
whose estimate cannot fit its GPU (naming the keys and the figures, and a change that fits), with the estimate
`plan` prints, which counts DeepSpeed ZeRO-1/2's float32 gradient partition at the optimizer step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from librarian.config import ConfigError, load_config
from librarian.learner import LearnerConfig, LoraConfig
from librarian.learner.config import DeepSpeedConfig
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.planning.memory_check import fit
from librarian.planning.memory_estimate import MicroBatch, learner_memory
from librarian.planning.model_shape import GIB, KNOWN

ROOT = Path(__file__).resolve().parents[2]
BUILDER = [f"config={ROOT / 'configs/train_builder.yaml'}"]
GPU = ["learner.device=cuda", "rollout.options.model=smollm2", "learner.gpu_memory_gib=45"]


def load(*overrides: str):
    return load_config(TrainBuilderConfig, BUILDER + list(overrides))


def test_a_micro_batch_no_gpu_holds_is_refused_before_ray_starts_with_a_budget_that_fits():
    with pytest.raises(ConfigError) as err:
        load(*GPU, "learner.max_tokens_per_micro_batch=10000000")
    text = str(err.value)
    assert "a learner rank (smollm2-135m) would not fit a GPU of 45.0 GiB (learner.gpu_memory_gib)" in text
    assert "now 10000000 tokens a micro-batch" in text and re.search(r"about \d+\.\d GiB of 45.0", text)
    budget = re.search(r"learner.max_tokens_per_micro_batch=(\d+) or less", text).group(1)
    assert load(*GPU, f"learner.max_tokens_per_micro_batch={budget}").learner.max_tokens_per_micro_batch == int(budget)
    load("learner.max_tokens_per_micro_batch=10000000")  # a CPU learner: nothing to check against


def test_without_a_gpu_size_the_largest_known_gpu_is_the_bar():
    with pytest.raises(ConfigError, match=r"GPU of 140\.4 GiB \(the largest GPU the estimate knows"):
        load("learner.device=cuda", "rollout.options.model=smollm2", "learner.max_tokens_per_micro_batch=10000000")
    load("learner.device=cuda", "rollout.options.model=smollm2", "learner.max_tokens_per_micro_batch=65536")
    # a model neither on this machine nor known cannot be estimated here (`librarian plan --policy` does it)
    load("learner.device=cuda", "rollout.options.model=/nowhere/model", "learner.max_tokens_per_micro_batch=10000000")


def test_a_colocated_engine_share_is_counted_and_a_share_that_fits_suggested():
    one_gpu = [f"config={ROOT / 'configs/one_gpu.yaml'}", "learner.gpu_memory_gib=24"]
    with pytest.raises(ConfigError) as err:
        load(*one_gpu, "rollout.options.engine_kwargs.gpu_memory_utilization=0.97")
    text = str(err.value)
    assert "a learner rank and its colocated vLLM engine" in text and "while the engine samples" in text
    share = re.search(r"gpu_memory_utilization=(0\.\d+) or less", text).group(1)
    load(*one_gpu, f"rollout.options.engine_kwargs.gpu_memory_utilization={share}")


def _full(**kw) -> LearnerConfig:
    ds = DeepSpeedConfig(zero_stage=kw.pop("stage", 2), offload_optimizer=kw.pop("offload", False))
    return LearnerConfig(engine=kw.pop("engine", "deepspeed"), precision="bf16", workers=2,
                         lora=LoraConfig(enabled=False), deepspeed=ds, gradient_checkpointing=True,
                         max_tokens_per_micro_batch=16384, **kw)


def test_zero2_counts_the_float32_gradient_partition_of_the_optimizer_step():
    shape, batch = KNOWN["qwen2.5-7b"], MicroBatch(16384, 8192)
    two = learner_memory(shape, _full(), batch)
    assert two.step_gradients == pytest.approx(shape.params * 4 / 2 / GIB)  # this rank's partition, in float32
    assert two.phases["step"] >= two.step_gradients and two.peak_phase == "step"  # so the step is this rank's peak
    learning = max(v for k, v in two.phases.items() if k != "step")
    assert two.total == pytest.approx(two.resident + two.phases["step"]) and two.phases["step"] > learning
    for other in (_full(stage=3), _full(offload=True), _full(engine="torch")):
        assert learner_memory(shape, other, batch).step_gradients == 0.0
    # a GPU between the two peaks: fits without the transient, not with it
    between = two.resident + (learning + two.phases["step"]) / 2
    verdict = fit(shape, _full(), 8192, between)
    assert verdict.learner.micro_batch_tokens == 16384 and not verdict.ok
