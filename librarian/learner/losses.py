"""Loss math from verl's `core_algos`, behind small wrappers: clipped policy loss, KL penalty, entropy,
aggregation. Tensors are (batch, length) and aligned token for token with the mask."""

from __future__ import annotations

import functools
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner.config import LossConfig
from librarian.learner.errors import LearnerError


def _verl() -> Any:
    from verl.trainer.ppo import core_algos

    return core_algos


def batch_info(mask: torch.Tensor) -> dict[str, int]:
    """What `agg_loss` needs so that micro-batch losses add up to the loss of the whole batch `mask`."""
    return {"dp_size": 1, "batch_num_tokens": int(mask.sum()),
            "global_batch_size": int((mask.sum(dim=-1) > 0).sum())}


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, info: dict[str, int] | None = None) -> torch.Tensor:
    """verl's `agg_loss`; `info` (from `batch_info` over the full batch) makes micro-batches add up."""
    info = info or batch_info(mask)
    return _verl().agg_loss(loss_mat, mask.float(), mode, dp_size=info["dp_size"],
                            batch_num_tokens=info["batch_num_tokens"], global_batch_size=info["global_batch_size"])


def _shapes(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 2 for s in shapes.values()):
        raise LearnerError(f"loss inputs must share one 2-d shape, got {shapes}")


def policy_loss(old_logprobs: torch.Tensor, logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cfg: LossConfig, info: dict[str, int] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss `cfg.policy_loss` from verl's registry, and its metrics.

    With `cfg.rollout_is` (token | sequence) `old_logprobs` are the rollout's and the loss is verl's rollout
    correction in bypass mode instead: REINFORCE weighted by truncated importance sampling,
    `-A * min(pi / pi_rollout, rollout_is_threshold) * log pi` (the weights detached), for samples generated
    by older weights (`rollout.asynchronous`); its metrics are `rollout_is_*` and `rollout_kl`."""
    _shapes(old_logprobs=old_logprobs, logprobs=logprobs, advantages=advantages, mask=mask)
    name = loss_mode(cfg)
    try:
        fn = _verl().get_policy_loss_fn(name)
    except ValueError as exc:
        raise LearnerError(f"learner.loss.policy_loss: {exc}") from None
    conf = actor_config(cfg, info or batch_info(mask))
    loss, metrics = fn(old_logprobs, logprobs, advantages, mask.float(), cfg.agg_mode, conf, None)
    if name == "bypass_mode":
        metrics = {("rollout_kl" if k == "rollout_corr/kl" else k): v for k, v in metrics.items()
                   if k.startswith(("rollout_corr/rollout_is_", "actor/")) or k == "rollout_corr/kl"}
    return loss, {k.split("/")[-1]: float(v) for k, v in metrics.items() if isinstance(v, int | float)}


def loss_mode(cfg: LossConfig) -> str:
    """verl's loss mode: the rollout correction's `bypass_mode` with `rollout_is`, else `cfg.policy_loss`."""
    return "bypass_mode" if cfg.rollout_is != "none" else cfg.policy_loss


def actor_config(cfg: LossConfig, info: dict[str, int]) -> Any:
    """verl's `ActorConfig` for the loss `cfg` over a batch `info` (`batch_info`): built once per (loss settings,
    batch), so every micro-batch of an update shares one."""
    key = (loss_mode(cfg), cfg.clip_ratio, cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c, cfg.agg_mode,
           cfg.rollout_is, cfg.rollout_is_threshold)
    return _actor_config(key, tuple(sorted(info.items())))


@functools.lru_cache(maxsize=16)
def _actor_config(key: tuple, info: tuple[tuple[str, int], ...]) -> Any:
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    name, clip_ratio, clip_low, clip_high, clip_c, agg_mode, rollout_is, threshold = key
    policy = PolicyLossConfig(loss_mode=name)
    if name == "bypass_mode":
        policy = PolicyLossConfig(loss_mode=name, rollout_correction=RolloutCorrectionConfig(
            rollout_is=rollout_is, rollout_is_threshold=threshold, bypass_mode=True, loss_type="reinforce"))
    return ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1, clip_ratio=clip_ratio,
                       clip_ratio_low=clip_low, clip_ratio_high=clip_high, clip_ratio_c=clip_c,
                       loss_agg_mode=agg_mode, global_batch_info=dict(info), policy_loss=policy)


def kl_loss(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, kind: str, agg_mode: str,
            info: dict[str, int] | None = None) -> torch.Tensor:
    """verl's `kl_penalty` estimator `kind` (k1, k2, k3/low_var_kl, abs, with '+' straight-through), aggregated."""
    _shapes(logprobs=logprobs, ref_logprobs=ref_logprobs, mask=mask)
    try:
        kl = _verl().kl_penalty(logprobs, ref_logprobs, kind)
    except NotImplementedError:
        raise LearnerError(f"learner.loss.kl_type {kind!r} is not a token-level KL estimator") from None
    return aggregate(kl, mask, agg_mode, info)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of softmax(logits) (verl's implementation)."""
    from verl.utils.torch_functional import entropy_from_logits as ent

    return ent(logits)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position (float32 for stability)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
