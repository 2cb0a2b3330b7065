"""How far GRPO moved a policy from its warm start: the weight change, and the KL on held-out rollouts.

A LoRA adapter's norm ||[A; B]|| says little about the policy: A starts at a
random matrix of norm ~20 and B at zero, so the norm is dominated by A's
start. What the policy computes changes by Delta W = (alpha / rank) B A per
adapted projection, so `weight_shift` compares the two checkpoints' Delta W
(full-weight checkpoints: the weights themselves). `kl_on_samples` measures
the policies themselves on sequences the trained one sampled on held-out
corpora: the k1 estimate of KL(trained || SFT), the mean over those samples
of log p_trained - log p_SFT of their generated tokens (grammar masks
applied, as in training), per build and per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import checkpoint
from librarian.learner.batch import PolicySample

LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"


def lora_deltas(state: Mapping[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Per adapted projection (the key without its lora_A/lora_B suffix): scale * B @ A."""
    out = {}
    for key, a in state.items():
        if key.endswith(LORA_A):
            stem = key[: -len(LORA_A)]
            out[stem] = scale * (state[stem + LORA_B].float() @ a.float())
    return out


def weight_shift(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor],
                 lora_scale: float | None) -> dict[str, float]:
    """||after - before|| of what the policy computes (LoRA: the Delta W of every projection, `lora_scale` =
    alpha / rank; full weights: the weights), the norm of `before`'s own change from the base model (LoRA) for
    scale, and their ratio."""
    if lora_scale is not None:
        a, b = lora_deltas(before, lora_scale), lora_deltas(after, lora_scale)
        if set(a) != set(b) or not a:
            raise ValueError("the two checkpoints adapt different projections (or none): not the same LoRA layout")
        moved = math.sqrt(sum(float((b[k] - a[k]).pow(2).sum()) for k in a))
        own = math.sqrt(sum(float(a[k].pow(2).sum()) for k in a))
        return {"delta_norm": moved, "warm_start_delta_norm": own, "relative": moved / own if own else float("inf")}
    if set(before) != set(after):
        raise ValueError("the two checkpoints hold different weights")
    moved = math.sqrt(sum(float((after[k].float() - before[k].float()).pow(2).sum()) for k in before))
    size = math.sqrt(sum(float(before[k].float().pow(2).sum()) for k in before))
    return {"delta_norm": moved, "weights_norm": size, "relative": moved / size if size else float("inf")}


def checkpoint_shift(before: str, after: str) -> dict[str, float]:
    """`weight_shift` between two learner checkpoints (the LoRA scale from their header)."""
    header = checkpoint.read_header(before)
    lora = header.get("lora") or {}
    scale = float(lora["alpha"]) / float(lora["rank"]) if lora.get("enabled") else None
    return weight_shift(checkpoint.read_tensor(before, "weights"), checkpoint.read_tensor(after, "weights"), scale)


def trajectory_samples(trajectories: Sequence[Any]) -> list[PolicySample]:
    """Each trajectory's token segments as samples (its grammar spans kept), for log-probs under another policy."""
    out = []
    for traj in trajectories:
        for seg in traj.segments():
            if any(seg.loss_mask):
                out.append(PolicySample(seg.token_ids, seg.loss_mask, seg.logprobs, (0.0,) * len(seg.token_ids),
                                        constraints=seg.constraints))
    return out


def kl_on_samples(logprobs: Callable[[str, Sequence[PolicySample]], list[float]], trained: str, sft: str,
                  samples: Sequence[PolicySample]) -> dict[str, Any]:
    """KL(trained || SFT) estimated on `samples` the trained policy generated: `logprobs(checkpoint, samples)`
    sums each sample's generated tokens' log-probs under a checkpoint's policy. Per sample and per token, with
    the spread of the per-sample values."""
    if not samples:
        raise ValueError("a KL estimate needs at least one sample")
    diffs = [t - s for t, s in zip(logprobs(trained, samples), logprobs(sft, samples), strict=True)]
    tokens = sum(sum(x.loss_mask) for x in samples)
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) if len(diffs) > 1 else 0.0
    return {"kl_per_sample": mean, "kl_per_sample_sd": sd, "kl_per_token": sum(diffs) / tokens,
            "samples": len(diffs), "tokens": tokens}
