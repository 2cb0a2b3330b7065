"""GRPO learns a learnable reward through the real rollout -> reward -> advantage -> learner -> publish path
(one turn; two turns with a terminal reward: test_learning_check_turns.py)."""

from __future__ import annotations

import statistics

import pytest
import torch  # noqa: TID253

from librarian.models.hf import tiny_llama
from librarian.pipelines.builder.learning_check import (
    LearningCheck,
    run_learning_check,
    target_reward,
    terminal_rewards,
)

STEPS = 10


def _gain(rewards: list[float]) -> float:
    return statistics.fmean(rewards[-3:]) - statistics.fmean(rewards[:3])


@pytest.fixture(scope="module")
def runs() -> dict[float, dict]:
    torch.set_num_threads(1)
    out = {}
    for lr in (1e-2, 0.0):
        out[lr] = run_learning_check(tiny_llama(seed=1), LearningCheck(steps=STEPS, lr=lr, groups=1, group_size=8))
    return out


def test_mean_reward_rises_when_the_policy_learns(runs):
    rewards = runs[1e-2]["reward_per_step"]
    assert len(rewards) == STEPS
    assert _gain(rewards) >= 0.3, rewards
    assert statistics.fmean(rewards[-3:]) >= 0.5, rewards


def test_the_control_with_lr_zero_does_not_rise(runs):
    rewards = runs[0.0]["reward_per_step"]
    assert abs(_gain(rewards)) < 0.2, rewards
    assert statistics.fmean(rewards[-3:]) < 0.5, rewards


def test_every_sampled_call_is_valid_and_groups_carry_signal(runs):
    for run in runs.values():
        assert run["valid_call_rate"] == [1.0] * STEPS
        assert statistics.fmean(run["nonzero_advantage_fraction"]) > 0.5
        assert all(m["grad_norm"] == 0.0 for m, f in zip(run["learner"], run["nonzero_advantage_fraction"],
                                                         strict=True) if f == 0.0)


def test_terminal_rewards_put_the_score_on_the_last_turn():
    assert terminal_rewards(1.0, 3) == [0.0, 0.0, 1.0]
    assert terminal_rewards(0.5, 1) == [0.5]
    assert terminal_rewards(1.0, 0) == []


def test_target_reward_reads_the_first_call():
    class Turn:
        def __init__(self, calls):
            self.calls = calls

    class Traj:
        def __init__(self, turns):
            self.turns = turns

    assert target_reward(Traj([Turn([]), Turn([{"name": "stop"}])]), "stop") == 1.0
    assert target_reward(Traj([Turn([{"name": "list"}]), Turn([{"name": "stop"}])]), "stop") == 0.0
    assert target_reward(Traj([]), "stop") == 0.0
    two = Traj([Turn([{"name": "list"}]), Turn([{"name": "stop"}])])
    assert target_reward(two, "stop", turn=1) == 1.0 and target_reward(two, "list", turn=1) == 0.0
    assert target_reward(Traj([Turn([{"name": "list"}])]), "list", turn=1) == 0.0  # it never reached turn 1
