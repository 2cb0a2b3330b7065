"""Config checks that fail at load time, before Ray starts: a vLLM worker's GPUs against its engine's parallel
size, pool timeouts (and a worker's start outlasting its engine's), `ray.reserve_timeout_s`, and a learner
group's batch split (DeepSpeed needs one sample a rank, not `grad_accum` of them). Pure: no Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from librarian.cluster.learner_group import LearnerGroupError, check_split
from librarian.config import ConfigError, load_config
from librarian.learner import LearnerError
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.researcher.config import TrainResearcherConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BUILDER = [f"config={CONFIGS / 'train_builder.yaml'}", f"config={CONFIGS / 'cluster.yaml'}"]
RESEARCHER = [f"config={CONFIGS / 'researcher_memorygym.yaml'}", f"config={CONFIGS / 'researcher_cluster.yaml'}"]


def builder(*overrides: str) -> TrainBuilderConfig:
    return load_config(TrainBuilderConfig, [*BUILDER, *overrides])


def test_the_gpu_presets_load_with_their_timeouts():
    cfg = builder()
    assert cfg.rollout.start_timeout_s > cfg.rollout.options["start_timeout_s"]
    assert cfg.probe.start_timeout_s > cfg.probe.options["start_timeout_s"] and cfg.ray.reserve_timeout_s == 1800
    jam = load_config(TrainResearcherConfig, RESEARCHER)
    assert jam.rollout.start_timeout_s == 2400 and jam.rollout.call_timeout_s == 3600


@pytest.mark.parametrize("overrides, ok", [
    (["rollout.options.engine_kwargs.tensor_parallel_size=2", "rollout.gpus_per_worker=2"], True),
    (["rollout.options.engine_kwargs.tensor_parallel_size=2", "rollout.options.engine_kwargs.pipeline_parallel_size=2",
      "rollout.gpus_per_worker=4"], True),
    (["rollout.gpus_per_worker=0.5"], True),  # a one-GPU engine may share a GPU (or take one Ray hides)
    (["rollout.gpus_per_worker=0"], True),
    (["rollout.options.engine_kwargs.tensor_parallel_size=2"], False),  # 1 GPU for a 2-GPU engine
    (["rollout.options.engine_kwargs.tensor_parallel_size=2", "rollout.gpus_per_worker=0"], False),
    (["rollout.gpus_per_worker=2"], False),  # a 1-GPU engine would leave one idle
    (["rollout.gpus_per_worker=1.5"], False),
])
def test_a_vllm_rollout_reserves_the_gpus_its_engine_spans(overrides, ok):
    if ok:
        builder(*overrides)
        return
    with pytest.raises(ConfigError) as err:
        builder(*overrides)
    text = str(err.value)
    assert "rollout.gpus_per_worker" in text and "tensor_parallel_size x pipeline_parallel_size" in text
    assert "rollout.options.engine_kwargs" in text


def test_the_check_applies_to_vllm_only_and_to_probes_and_the_researcher():
    builder("rollout.backend=hf", "rollout.options={model: tiny}", "rollout.gpus_per_worker=2")  # no engine
    with pytest.raises(ConfigError, match=r"probe\.gpus_per_worker \(0\) must equal .*\(2 x 1 = 2\)"):
        builder("probe.options.engine_kwargs.tensor_parallel_size=2")
    with pytest.raises(ConfigError, match=r"rollout\.gpus_per_worker \(1\) must equal .*\(1 x 2 = 2\)"):
        load_config(TrainResearcherConfig, [*RESEARCHER, "rollout.options.engine_kwargs.pipeline_parallel_size=2"])


def test_a_lora_learner_and_its_vllm_engines_agree_on_how_the_adapter_travels():
    with pytest.raises(ConfigError, match=r"rollout\.options\.enable_lora=true, or learner\.lora\.publish=merged"):
        builder("rollout.options.enable_lora=false")
    merged = builder("rollout.options.enable_lora=false", "learner.lora.publish=merged")
    assert merged.learner.lora.publish == "merged"
    with pytest.raises(LearnerError, match="learner.lora.publish must be one of adapter, merged"):
        builder("learner.lora.publish=folded")


def test_timeouts_are_checked():
    with pytest.raises(ConfigError, match=r"rollout\.start_timeout_s \(1000\) must be longer than the engine's own "
                                          r"rollout\.options\.start_timeout_s \(1800\)"):
        builder("rollout.start_timeout_s=1000")
    with pytest.raises(ConfigError, match=r"rollout\.start_timeout_s \(600\) must be longer .* \(900\)"):
        builder("rollout.start_timeout_s=600", "rollout.options={model: /models/policy}")  # the engine's default
    with pytest.raises(ConfigError, match=r"probe\.start_timeout_s \(1800\) must be longer"):
        builder("probe.start_timeout_s=1800")
    with pytest.raises(ConfigError, match="rollout.call_timeout_s >= 0"):
        builder("rollout.call_timeout_s=-1")
    with pytest.raises(ConfigError, match="probe.start_timeout_s must be > 0"):
        builder("probe.start_timeout_s=0")
    with pytest.raises(ConfigError, match="ray.reserve_timeout_s must be > 0"):
        builder("ray.reserve_timeout_s=0")
    assert builder("rollout.call_timeout_s=0").rollout.call_timeout_s == 0  # 0: no limit


def test_a_learner_group_needs_one_sample_a_rank_whatever_the_engine():
    check_split("step", 2, 2)  # DeepSpeed too: a rank with fewer samples than grad_accum makes fewer micro-batches
    with pytest.raises(LearnerGroupError, match=r"step: a batch of 1 samples cannot be split over 2 learner ranks "
                                                r"\(learner\.workers\)"):
        check_split("step", 1, 2)
