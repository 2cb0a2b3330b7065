"""Packing trajectories into samples: each generated token carries its own turn's advantage."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.learner import LearnerError, PolicySample, collate, group_samples, multi_turn_grpo
from librarian.learner.batch import split
from tests.learner.test_sft import teacher_trajectory


def test_group_samples_put_each_turns_advantage_on_its_tokens():
    trajs = [teacher_trajectory(True, k) for k in range(3)]
    rewards = [[0.0, 1.0], [0.5, 0.0], [0.0, 0.0]]
    samples, adv = group_samples(trajs, rewards, ["q", "q", "q"], policy_versions=[4, 4, 5])
    want, _ = multi_turn_grpo(torch.tensor([r for rs in rewards for r in rs]), [0, 0, 1, 1, 2, 2], ["q"] * 6)
    assert torch.allclose(adv, want)
    assert len(samples) == 3 and [s.policy_version for s in samples] == [4, 4, 5]
    first = samples[0]
    assert first.loss_mask == (0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1)
    a0, a1 = float(want[0]), float(want[1])
    assert first.advantages == pytest.approx((0, 0, 0, 0, a0, a0, a0, 0, 0, a1, a1))
    assert first.old_logprobs[4:7] == (-1.0, -1.0, -1.0)


def test_mismatched_rewards_and_bad_samples_are_named():
    with pytest.raises(LearnerError, match="2 turns with tokens but 1 turn rewards"):
        group_samples([teacher_trajectory(True, 0)], [[1.0]], ["q"])
    with pytest.raises(LearnerError, match="loss_mask\\[0\\] must be 0"):
        PolicySample((1, 2), (1, 1), (0.0, 0.0), (0.0, 0.0))
    with pytest.raises(LearnerError, match="equal lengths"):
        PolicySample((1, 2, 3), (0, 1), (0.0, 0.0), (0.0, 0.0))


def test_collate_pads_right_and_split_balances():
    a = PolicySample((5, 6, 7), (0, 1, 1), (0.0, -1.0, -2.0), (0.0, 1.0, 1.0))
    b = PolicySample((8, 9), (0, 1), (0.0, -3.0), (0.0, -1.0))
    batch = collate([a, b], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7], [8, 9, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch.targets()["mask"].tolist() == [[1.0, 1.0], [1.0, 0.0]]
    assert [len(p) for p in split([a, b, a, b, a], 2)] == [3, 2]
