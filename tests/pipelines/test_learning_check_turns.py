"""GRPO learns a terminal reward over two turns through the real rollout -> learner path (one turn:
test_learning_check.py; a module of its own so that `make test`'s two workers run the two checks side by side)."""

from __future__ import annotations

import statistics

import pytest
import torch  # noqa: TID253

from librarian.models.hf import tiny_llama
from librarian.pipelines.builder.learning_check import LearningCheck, run_learning_check
from tests.pipelines.test_learning_check import _gain

MULTI_TURN_STEPS = 12


@pytest.fixture(scope="module")
def multi_turn_runs() -> dict[float, dict]:
    """Builds of 2 turns, rewarded (terminally) when the second turn calls `list`: a build that stops at its first
    turn scores 0, so the first turn's credit comes only from the return it shares with the second."""
    torch.set_num_threads(1)
    return {lr: run_learning_check(tiny_llama(seed=1), LearningCheck(steps=MULTI_TURN_STEPS, turns=2, target="list",
                                                                      lr=lr, groups=1, group_size=8))
            for lr in (1.5e-2, 0.0)}


def test_a_terminal_reward_over_two_turns_is_learned(multi_turn_runs):
    rewards = multi_turn_runs[1.5e-2]["reward_per_step"]
    assert len(rewards) == MULTI_TURN_STEPS
    assert _gain(rewards) >= 0.3, rewards
    assert statistics.fmean(rewards[-3:]) >= 0.5, rewards
    control = multi_turn_runs[0.0]["reward_per_step"]
    assert abs(_gain(control)) < 0.2, control
    assert statistics.fmean(control[-3:]) < 0.5, control
    assert all(min(run["valid_call_rate"]) == 1.0 for run in multi_turn_runs.values())
