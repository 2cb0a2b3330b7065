"""Verified-trajectory SFT: only verified trajectories are kept, only generated tokens are trained on."""

from __future__ import annotations

import dataclasses

import pytest

from librarian.learner import Learner, LearnerConfig, LearnerError, LoraConfig
from librarian.learner.sft import fine_tune, mean_nll, verified_samples
from librarian.roles.trajectory import Trajectory, TurnRecord
from tests.learner.conftest import tiny_model

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def teacher_trajectory(ok: bool, offset: int) -> Trajectory:
    """Two turns; the second turn's prompt extends the first turn's sequence (packed into one segment)."""
    p1 = (1, 2, 3, 4 + offset)
    r1 = (50 + offset, 51, 52)
    p2 = p1 + r1 + (7, 8)
    r2 = (60 + offset, 61)
    turns = [TurnRecord(index=0, text="a", prompt_ids=p1, response_ids=r1, logprobs=(-1.0,) * 3),
             TurnRecord(index=1, text="b", prompt_ids=p2, response_ids=r2, logprobs=(-1.0,) * 2)]
    return Trajectory(role="builder", task="ok" if ok else "bad", budget=4, turns=turns)


def test_only_verified_trajectories_are_kept_and_masks_cover_generated_tokens():
    trajs = [teacher_trajectory(True, 0), teacher_trajectory(False, 1), teacher_trajectory(True, 2)]
    samples = verified_samples(trajs, keep=lambda t: t.task == "ok")
    assert len(samples) == 2
    assert samples[0].loss_mask == (0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1)
    assert samples[0].advantages == tuple(float(m) for m in samples[0].loss_mask)


@pytest.mark.parametrize("lora, drop", [(LoraConfig(enabled=False), 2.0),
                                         (LoraConfig(rank=8, alpha=16, target_modules=ALL), 0.3)])
def test_sft_loss_decreases_on_a_tiny_model(pad_id, lora, drop):
    # a random tiny Llama's logits are small (embeddings ~0.02), so adapters alone move the NLL less
    trajs = [teacher_trajectory(True, k) for k in range(4)]
    samples = verified_samples(trajs, keep=lambda t: True)
    learner = Learner(tiny_model(0), LearnerConfig(lr=5e-2 if lora.enabled else 1e-2, lora=lora), pad_id)
    before = mean_nll(learner, samples)
    history = fine_tune(learner, samples, epochs=6, batch_size=2, progress=False)
    after = mean_nll(learner, samples)
    assert len(history) == 12 and after < before - drop
    assert history[-1]["sft_loss"] < history[0]["sft_loss"]


def test_nothing_verified_is_a_clear_error(pad_id):
    learner = Learner(tiny_model(0), LearnerConfig(lora=LoraConfig(rank=2, alpha=2)), pad_id)
    with pytest.raises(LearnerError, match="no verified trajectories"):
        fine_tune(learner, [], progress=False)


def test_a_grpo_step_with_zero_advantages_after_sft_leaves_the_weights(pad_id):
    """SFT's AdamW moments are reset: a GRPO step with no signal must not keep moving the SFT weights."""
    import torch

    trajs = [teacher_trajectory(True, k) for k in range(4)]
    samples = verified_samples(trajs, keep=lambda t: True)
    learner = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=LoraConfig(enabled=False)), pad_id)
    fine_tune(learner, samples, epochs=2, batch_size=2, progress=False)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    zero = [dataclasses.replace(s, advantages=(0.0,) * len(s.advantages)) for s in samples]
    metrics = learner.step(zero)
    assert metrics["grad_norm"] == 0.0
    after = learner.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_sft_steps_with_its_own_eps_and_gives_the_learner_its_own_back(pad_id):
    """`sft.eps`: SFT under a learner whose GRPO epsilon is large trains as a learner with SFT's epsilon would,
    and the learner's epsilon is back on the optimizer afterwards."""
    import torch

    samples = verified_samples([teacher_trajectory(True, k) for k in range(4)], keep=lambda t: True)

    def tuned(eps: float, sft_eps: float | None) -> Learner:
        learner = Learner(tiny_model(0), LearnerConfig(lr=1e-2, eps=eps, lora=LoraConfig(enabled=False)), pad_id)
        fine_tune(learner, samples, epochs=1, batch_size=2, progress=False, eps=sft_eps)
        return learner

    small, overridden, large = tuned(1e-8, None), tuned(1e-1, 1e-8), tuned(1e-1, None)
    weights = [m.model.state_dict() for m in (small, overridden, large)]
    assert all(torch.allclose(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.allclose(weights[0][k], weights[2][k]) for k in weights[0])
    assert {g["eps"] for g in overridden.engine.optimizer.param_groups} == {1e-1}
