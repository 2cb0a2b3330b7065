"""Truncated importance sampling against the rollout log-probs (`learner.loss.rollout_is`), for stale samples."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.learner import LossConfig
from librarian.learner.losses import policy_loss


def _batch(seed: int = 0, shift: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    logp = torch.randn(4, 6, generator=g).requires_grad_(True)
    rollout = logp.detach() + shift * torch.randn(4, 6, generator=g)  # the weights that sampled them: older
    adv = torch.randn(4, 6, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.2).float()
    return logp, rollout, adv, mask


@pytest.mark.parametrize("threshold", [2.0, 1.2])
def test_token_tis_gradient_is_the_truncated_ratio_times_the_policy_gradient(threshold):
    logp, rollout, adv, mask = _batch()
    loss, metrics = policy_loss(rollout, logp, adv, mask, LossConfig(rollout_is="token", rollout_is_threshold=threshold))
    loss.backward()
    w = torch.exp(logp.detach() - rollout).clamp(max=threshold)
    assert torch.allclose(logp.grad, -adv * w * mask / mask.sum(), atol=1e-6)  # token-mean over the trained tokens
    assert (w >= threshold).any() and metrics["rollout_is_max"] <= threshold + 1e-6
    assert {"rollout_is_mean", "rollout_kl", "rollout_is_eff_sample_size"} <= set(metrics)
    assert "kl" not in metrics  # the learner's own KL-to-reference metric keeps its name


def test_without_correction_the_loss_is_the_clipped_ratio_to_the_rollout_policy():
    logp, rollout, adv, mask = _batch(shift=0.0)  # on-policy: both losses give the same gradient
    plain, _ = policy_loss(rollout, logp, adv, mask, LossConfig())
    (g_plain,) = torch.autograd.grad(plain, logp)
    tis, _ = policy_loss(rollout, logp, adv, mask, LossConfig(rollout_is="token"))
    (g_tis,) = torch.autograd.grad(tis, logp)
    assert torch.allclose(g_plain, g_tis, atol=1e-6)
    logp, rollout, adv, mask = _batch(shift=0.6)  # stale: PPO clips the ratio, TIS reweights; they differ
    plain, _ = policy_loss(rollout, logp, adv, mask, LossConfig())
    tis, _ = policy_loss(rollout, logp, adv, mask, LossConfig(rollout_is="token"))
    assert not torch.allclose(torch.autograd.grad(plain, logp)[0], torch.autograd.grad(tis, logp)[0])
