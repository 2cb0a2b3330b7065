"""benchmarks/rl_throughput.py's figures from a run's history and trajectories (the runs themselves are the
benchmark's; this checks the arithmetic that turns them into builds a minute and step-0 quality)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rl_throughput", ROOT / "benchmarks" / "rl_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
