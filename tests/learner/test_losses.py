"""verl's loss math through the wrappers: the clipped objective, KL estimators, and micro-batch additivity."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.learner import LearnerError, LossConfig
from librarian.learner.losses import actor_config, aggregate, batch_info, kl_loss, policy_loss


def rand(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_vanilla_policy_loss_is_the_dual_clipped_ppo_objective():
    old, adv = rand((3, 6), 0), rand((3, 6), 1)
    new = old + 0.5 * rand((3, 6), 2)
    mask = (rand((3, 6), 3) > -0.5).float()
    cfg = LossConfig(clip_ratio=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    loss, metrics = policy_loss(old, new, adv, mask, cfg)
    ratio = torch.exp(new - old)
    clipped = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.28))
    dual = torch.where(adv < 0, torch.minimum(clipped, -adv * 3.0), clipped)
    assert float(loss) == pytest.approx(float((dual * mask).sum() / mask.sum()), rel=1e-5)
    assert 0.0 <= metrics["pg_clipfrac"] <= 1.0


def test_the_verl_actor_config_is_built_once_per_loss_and_batch():
    """Every micro-batch of an update shares one `ActorConfig`; another batch or loss setting gets its own."""
    info = {"dp_size": 1, "batch_num_tokens": 12, "global_batch_size": 3}
    first = actor_config(LossConfig(clip_ratio=0.2), info)
    assert actor_config(LossConfig(clip_ratio=0.2), dict(info)) is first
    assert first.global_batch_info == info and first.clip_ratio == 0.2
    assert actor_config(LossConfig(clip_ratio=0.3), info) is not first
    assert actor_config(LossConfig(clip_ratio=0.2), {**info, "batch_num_tokens": 13}) is not first
    bypass = actor_config(LossConfig(rollout_is="token", rollout_is_threshold=1.5), info)
    assert bypass.policy_loss.loss_mode == "bypass_mode"
    assert bypass.policy_loss.rollout_correction.rollout_is_threshold == 1.5


def test_policy_loss_gradient_raises_positive_advantage_tokens():
    old = torch.full((1, 4), -2.0)
    new = old.clone().requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 1.0, 0.0]])
    loss, _ = policy_loss(old, new, adv, torch.ones(1, 4), LossConfig())
    loss.backward()
    assert new.grad[0, 0] < 0 and new.grad[0, 1] > 0 and new.grad[0, 3] == 0  # descent raises adv>0 log-probs


def test_other_registered_policy_losses_run_and_unknown_names_are_named():
    old, adv, mask = rand((2, 5), 0), rand((2, 5), 1), torch.ones(2, 5)
    for name in ("gspo", "cispo", "geo_mean"):
        loss, _ = policy_loss(old, old + 0.1, adv, mask, LossConfig(policy_loss=name))
        assert torch.isfinite(loss)
    with pytest.raises(LearnerError, match="policy_loss"):
        policy_loss(old, old, adv, mask, LossConfig(policy_loss="nope"))
    with pytest.raises(LearnerError, match="share one 2-d shape"):
        policy_loss(old, old[:, :3], adv, mask, LossConfig())


def test_kl_estimators_match_their_formulas():
    logp, ref = rand((2, 5), 0), rand((2, 5), 1)
    mask = torch.ones(2, 5)
    k1 = kl_loss(logp, ref, mask, "k1", "token-mean")
    k2 = kl_loss(logp, ref, mask, "k2", "token-mean")
    k3 = kl_loss(logp, ref, mask, "low_var_kl", "token-mean")
    d = ref - logp
    assert float(k1) == pytest.approx(float((logp - ref).mean()), rel=1e-5)
    assert float(k2) == pytest.approx(float((0.5 * d ** 2).mean()), rel=1e-5)
    assert float(k3) == pytest.approx(float((torch.exp(d) - d - 1).clamp(-10, 10).mean()), rel=1e-5)
    assert float(kl_loss(logp, logp, mask, "k3", "token-mean")) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6), st.integers(1, 5), st.integers(0, 10_000),
       st.sampled_from(["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"]))
def test_micro_batch_losses_add_up_to_the_full_batch_loss(rows, cut, seed, mode):
    cut = min(cut, rows - 1)
    loss_mat = rand((rows, 7), seed)
    mask = (rand((rows, 7), seed + 1) > 0).float()
    mask[:, 0] = 1.0  # no empty rows: verl drops them from seq-mean counts in each part alike
    info = batch_info(mask)
    whole = aggregate(loss_mat, mask, mode, info)
    parts = aggregate(loss_mat[:cut], mask[:cut], mode, info) + aggregate(loss_mat[cut:], mask[cut:], mode, info)
    assert float(parts) == pytest.approx(float(whole), rel=1e-5, abs=1e-6)
