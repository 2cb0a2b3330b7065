"""benchmarks/rl_throughput.py's figures from a run's history and trajectories (the runs themselves are the
benchmark's; this checks the arithmetic that turns them into builds a minute and step-0 quality)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rl_throughput", ROOT / "benchmarks" / "rl_throughput.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _row(step: int, rewards: list[float], valid: list[bool], tokens: int = 10) -> dict:
    return {"step": step, "turns": [{"reward": r, "valid": v, "tokens": tokens} for r, v in zip(rewards, valid,
                                                                                               strict=True)]}


def test_rates_leave_out_the_warm_up_step(bench):
    history = [{"step": 0.0, "step_s": 600.0, "rollout_s": 500.0, "update_s": 100.0, "reward_s": 1.0},
               {"step": 1.0, "step_s": 60.0, "rollout_s": 20.0, "update_s": 30.0, "reward_s": 2.0},
               {"step": 2.0, "step_s": 60.0, "rollout_s": 20.0, "update_s": 50.0, "reward_s": 4.0}]
    rows = [_row(s, [0.0, 1.0], [True, True]) for s in (0, 1, 2) for _ in range(4)]
    r = bench.rates(history, rows)
    assert r["builds_per_minute"] == pytest.approx(4.0)  # 8 builds in 120 s
    assert r["tokens_per_second_rollout"] == pytest.approx(160 / 40)
    assert r["learner_seconds_per_step"] == pytest.approx(40.0)
    assert r["probe_seconds_per_step"] == pytest.approx(3.0)
    assert r["steps_measured"] == 2.0


def test_step0_quality_counts_turns_and_builds_with_cis(bench):
    rows = [_row(0, [0.0, 1.0], [True, False]), _row(0, [0.0, 0.0], [True, True]), _row(1, [1.0], [False])]
    q = bench.step0_quality(rows)
    assert q["builds"] == 2
    assert q["valid_call_rate"] == pytest.approx(0.75) and q["success_rate"] == pytest.approx(0.5)
    low, high = q["success_rate_ci"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0
    assert bench.overlap([0.1, 0.4], [0.3, 0.9]) and not bench.overlap([0.1, 0.2], [0.3, 0.9])


def test_researcher_figures_count_trajectories_and_take_validity_from_the_history(bench):
    history = [{"step": 0.0, "step_s": 300.0, "rollout_s": 100.0, "update_s": 150.0, "reward_s": 1.0,
                "valid_call_rate": 0.875},
               {"step": 1.0, "step_s": 120.0, "rollout_s": 30.0, "update_s": 80.0, "reward_s": 1.0}]
    rows = [{"step": s, "reward": r, "turns": [{"calls": ["search"], "tokens": 20}]}
            for s in (0, 1) for r in (0.0, 0.5, 1.0, 0.0)]
    r = bench.rates(history, rows, "trajectories")
    assert r["trajectories_per_minute"] == pytest.approx(2.0) and r["trajectories_per_step"] == 4.0
    researcher = bench.PIPELINES["researcher"]
    q = bench.step0_quality(rows, researcher.reward, researcher.unit, history)
    assert q["trajectories"] == 4 and q["success_rate"] == pytest.approx(0.5) and "success_rate_ci" in q
    assert q["valid_call_rate"] == pytest.approx(0.875) and "valid_call_rate_ci" not in q


def test_each_pipelines_fast_settings_load_and_pass_its_checks(bench):
    for name, pipeline in bench.PIPELINES.items():
        cfg = bench.load_config(pipeline.config_cls, [*pipeline.common, *pipeline.fast, "out_dir=/tmp/unused"],
                                config_file=str(ROOT / pipeline.default_config))
        pipeline.check(cfg)
        assert cfg.rollout.backend == "vllm" and cfg.learner.lora.publish == "merged", name
