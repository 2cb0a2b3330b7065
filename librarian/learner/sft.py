"""Verified-trajectory SFT (paper 002): keep the teacher trajectories a verifier accepted, fine-tune on the
tokens the teacher generated (the loss mask), through the learner's engine (LoRA or full weights)."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)
from tqdm.auto import tqdm

from librarian.learner.batch import PolicySample, collate
from librarian.learner.errors import LearnerError


def verified_samples(trajectories: Sequence[Any], keep: Callable[[Any], bool]) -> list[PolicySample]:
    """Packed segments of the trajectories `keep` accepts (advantage 1 on generated tokens)."""
    out: list[PolicySample] = []
    for traj in trajectories:
        if not keep(traj):
            continue
        for seg in traj.segments():
            if not any(seg.loss_mask):
                continue
            out.append(PolicySample(seg.token_ids, seg.loss_mask, seg.logprobs, tuple(float(m) for m in seg.loss_mask)))
    return out


def sft_step(learner: Any, samples: Sequence[PolicySample]) -> dict[str, float]:
    """One optimizer update minimising the mean negative log-likelihood of masked-in tokens.

    Micro-batches as in `Learner.step` (`grad_accum`, fewer when a batch, such as an epoch's last, has fewer
    samples; or the token budget), under every engine."""
    if not samples:
        raise LearnerError("sft_step needs at least one sample")
    start = time.perf_counter()
    total = max(1, sum(s.trained_tokens for s in samples))
    loss_sum, tokens = 0.0, 0
    for part, weight in learner.micro_batches(learner.ranks.shard(samples)):  # in a learner group: this rank's share
        batch = collate(part, learner.pad_id).to(learner.engine.device)
        t, first = learner._targets(batch)
        logp, _ = learner.token_stats(batch, t, first, temperature=1.0)
        nll = -(logp * t["mask"]).sum() / total * learner.world  # ranks average their gradients
        learner.engine.backward(nll * weight)
        loss_sum += weight * float(nll.detach()) / learner.world
        tokens += int(batch.attention_mask.sum()) if weight else 0
    loss_sum, tokens = learner.ranks.all_reduce([loss_sum, tokens])
    grad_norm = learner.engine.step()
    learner.step_count += 1
    learner.version += 1
    learner.samples_seen += len(samples)
    wall = time.perf_counter() - start
    return {"sft_loss": loss_sum, "grad_norm": grad_norm, "tokens_per_s": tokens / max(wall, 1e-9),
            "step": float(learner.step_count)}


def fine_tune(learner: Any, samples: Sequence[PolicySample], epochs: int = 1, batch_size: int = 8,
              seed: int = 0, progress: bool = True, freeze_reference: bool = True,
              lr: float | None = None, eps: float | None = None) -> list[dict[str, float]]:
    """`epochs` passes over `samples` in shuffled batches; returns each step's metrics.

    At the end the fine-tuned policy becomes the learner's KL reference (`Learner.freeze_reference`), so a
    following GRPO stage regularises towards it rather than back to the base model (paper 002);
    `freeze_reference=False` leaves the reference as it was. The optimizer's moments are reset, so a GRPO
    step whose advantages are all zero leaves the weights where SFT put them. `lr` and `eps` (None: the
    learner's) are SFT's own learning rate and AdamW epsilon; the learner's are restored afterwards."""
    if not samples:
        raise LearnerError("no verified trajectories to fine-tune on (did the verifier reject them all?)")
    if epochs < 1 or batch_size < 1:
        raise LearnerError(f"fine_tune needs epochs >= 1 and batch_size >= 1, got {epochs}, {batch_size}")
    order = list(range(len(samples)))
    rng = random.Random(seed)
    history: list[dict[str, float]] = []
    steps = epochs * ((len(samples) + batch_size - 1) // batch_size)
    own = (learner.cfg.lr, learner.cfg.eps)
    if lr is not None or eps is not None:
        learner.engine.set_step(own[0] if lr is None else lr, own[1] if eps is None else eps)
    with tqdm(total=steps, desc="sft", disable=not progress or not sys.stderr.isatty()) as bar:
        for _ in range(epochs):
            rng.shuffle(order)
            for at in range(0, len(order), batch_size):
                history.append(sft_step(learner, [samples[i] for i in order[at:at + batch_size]]))
                bar.set_postfix(loss=f"{history[-1]['sft_loss']:.3f}")
                bar.update()
                if progress and not sys.stderr.isatty():  # a Ray actor forwards whole lines only
                    print(f"sft step {len(history)}/{steps}: loss {history[-1]['sft_loss']:.4f}", file=sys.stderr,
                          flush=True)
    if lr is not None or eps is not None:
        learner.engine.set_step(*own)
    if freeze_reference:
        learner.freeze_reference()
    learner.engine.reset_optimizer()  # GRPO starts from the SFT weights with fresh moments, as a new run would
    return history


@torch.no_grad()
def mean_nll(learner: Any, samples: Sequence[PolicySample]) -> float:
    """Mean negative log-likelihood of the masked-in tokens under the learner's current weights."""
    batch = collate(samples, learner.pad_id).to(learner.engine.device)
    t, first = learner._targets(batch)
    logp, _ = learner.token_stats(batch, t, first, temperature=1.0)
    return float(-(logp * t["mask"]).sum() / t["mask"].sum().clamp(min=1))
