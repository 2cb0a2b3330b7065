"""The learner: one object a Ray actor can own.

`step(samples) -> metrics` runs one optimizer update over a batch of
`PolicySample`s (split into `grad_accum` micro-batches whose losses add up to
the loss of the whole batch), `publish_weights() -> (version, payload)`,
`save(dir)` / `load(dir)` with exact resume (weights, optimizer, RNG, step,
version, samples seen, and the caller's data position in `extra`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from librarian.learner import checkpoint
from librarian.learner.batch import PolicySample, collate, split
from librarian.learner.config import LearnerConfig, validate
from librarian.learner.errors import LearnerError
from librarian.learner.losses import aggregate, entropy_from_logits, kl_loss, policy_loss, token_logprobs
from librarian.learner.weights import WeightsPayload

log = logging.getLogger(__name__)


def make_engine(model: Any, cfg: LearnerConfig) -> Any:
    """The engine `cfg.engine` around `model`."""
    if cfg.engine == "deepspeed":
        from librarian.learner.deepspeed_engine import DeepSpeedEngine

        return DeepSpeedEngine(model, cfg)
    from librarian.learner.engine import TorchEngine

    return TorchEngine(model, cfg)


class Learner:
    """GRPO updates on a causal LM (LoRA or full weights), with weight publishing and checkpoints."""

    def __init__(self, model: Any, cfg: LearnerConfig | None = None, pad_id: int = 0) -> None:
        self.cfg = validate(cfg or LearnerConfig())
        with torch.random.fork_rng(devices=[]):  # seeded adapter init, the caller's RNG untouched
            torch.manual_seed(self.cfg.seed)
            self.engine = make_engine(model, self.cfg)
        self.pad_id = pad_id
        self.step_count = 0
        self.version = 0
        self.samples_seen = 0

    @property
    def model(self) -> Any:
        return self.engine.module

    def _reference(self) -> Any:
        if not self.cfg.lora.enabled:
            raise LearnerError("learner.loss.kl_coef > 0 needs LoRA (the reference policy is the base model "
                               "with the adapters disabled)")
        return self.model.disable_adapter()

    def _logits(self, ids: torch.Tensor, attention: torch.Tensor, first: int = 0) -> torch.Tensor:
        """Next-token logits for target columns `first`.. (the vocabulary projection skips earlier positions)."""
        keep = ids.shape[1] - first
        out = self.model(input_ids=ids, attention_mask=attention, use_cache=False, logits_to_keep=keep)
        return out.logits[:, -keep:-1].float() / self.cfg.temperature

    @staticmethod
    def _targets(batch: Any) -> tuple[dict[str, torch.Tensor], int]:
        t = batch.targets()
        cols = torch.nonzero(t["mask"].sum(dim=0) > 0)
        first = int(cols[0]) if len(cols) else 0
        return {k: v[:, first:] for k, v in t.items()}, first

    def step(self, samples: Sequence[PolicySample]) -> dict[str, float]:
        """One optimizer update over `samples`; returns loss, pg_loss, kl, entropy, grad_norm, tokens/s, ..."""
        if not samples:
            raise LearnerError("Learner.step needs at least one sample")
        start = time.perf_counter()
        micro = split(samples, self.cfg.grad_accum)
        full = collate(samples, self.pad_id).targets()["mask"]
        info = {"dp_size": 1, "batch_num_tokens": max(1, int(full.sum())),
                "global_batch_size": max(1, int((full.sum(dim=-1) > 0).sum()))}
        totals: dict[str, float] = {"loss": 0.0, "pg_loss": 0.0, "entropy": 0.0, "kl": 0.0}
        clip: dict[str, float] = {}
        tokens = 0
        loss_cfg = self.cfg.loss
        device = self.engine.device
        for part in micro:
            batch = collate(part, self.pad_id).to(device)
            t, first = self._targets(batch)
            tokens += int(batch.attention_mask.sum())
            logits = self._logits(batch.input_ids, batch.attention_mask, first)
            logp = token_logprobs(logits, t["ids"])
            pg, metrics = policy_loss(t["old"], logp, t["adv"], t["mask"], loss_cfg, info)
            with torch.no_grad():
                ent = aggregate(entropy_from_logits(logits.detach()), t["mask"], loss_cfg.agg_mode, info)
            loss = pg
            if loss_cfg.entropy_coef:
                loss = loss - loss_cfg.entropy_coef * aggregate(entropy_from_logits(logits), t["mask"],
                                                                loss_cfg.agg_mode, info)
            kl = torch.zeros(())
            if loss_cfg.kl_coef > 0:
                with torch.no_grad(), self._reference():
                    ref = token_logprobs(self._logits(batch.input_ids, batch.attention_mask, first), t["ids"])
                kl = kl_loss(logp, ref, t["mask"], loss_cfg.kl_type, loss_cfg.agg_mode, info)
                loss = loss + loss_cfg.kl_coef * kl
            self.engine.backward(loss)
            share = len(part) / len(samples)
            totals["loss"] += float(loss.detach())
            totals["pg_loss"] += float(pg.detach())
            totals["entropy"] += float(ent)
            totals["kl"] += float(kl.detach())
            for k, v in metrics.items():
                clip[k] = clip.get(k, 0.0) + share * v
        grad_norm = self.engine.step()
        if not all(map(_finite, totals.values())) or not _finite(grad_norm):
            raise LearnerError(f"non-finite loss or gradient at step {self.step_count + 1}: {totals}, "
                               f"grad_norm={grad_norm}")
        self.step_count += 1
        self.version += 1
        self.samples_seen += len(samples)
        wall = time.perf_counter() - start
        versions = [s.policy_version for s in samples if s.policy_version >= 0]
        return {**totals, **clip, "grad_norm": grad_norm, "tokens": float(tokens),
                "trained_tokens": float(info["batch_num_tokens"]), "tokens_per_s": tokens / max(wall, 1e-9),
                "learner_s": wall, "step": float(self.step_count), "version": float(self.version),
                "staleness": float(self.version - 1 - min(versions)) if versions else 0.0}

    def publish_weights(self) -> tuple[int, WeightsPayload]:
        """The current policy as (version, payload); the version grows by one per step."""
        kind = "lora" if self.cfg.lora.enabled else "full"
        lora = {k: v for k, v in dataclasses.asdict(self.cfg.lora).items() if k != "enabled"} if kind == "lora" else {}
        payload = WeightsPayload(self.version, kind, self.engine.trainable_state(), lora)
        return self.version, payload

    def save(self, folder: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """A checkpoint that `load` resumes exactly; `extra` (JSON) holds e.g. the data position."""
        header = {"step": self.step_count, "version": self.version, "samples_seen": self.samples_seen,
                  "engine": self.cfg.engine, "lora": dataclasses.asdict(self.cfg.lora), "extra": extra or {}}
        tensors = {"weights": self.engine.trainable_state(), "optimizer": self.engine.optimizer_state(),
                   "rng": checkpoint.rng_state()}
        return checkpoint.write(folder, header, tensors, self.engine.save)

    def load(self, folder: str | Path) -> dict[str, Any]:
        """Resume from `save`'s folder; returns its `extra`. The base model and config must match."""
        header = checkpoint.read_header(folder)
        if header["lora"] != dataclasses.asdict(self.cfg.lora) or header["engine"] != self.cfg.engine:
            raise LearnerError(f"checkpoint {folder} was written with engine {header['engine']!r} and lora "
                               f"{header['lora']}, this learner has {self.cfg.engine!r} and "
                               f"{dataclasses.asdict(self.cfg.lora)}")
        self.engine.load_trainable_state(checkpoint.read_tensor(folder, "weights"))
        self.engine.load_optimizer_state(checkpoint.read_tensor(folder, "optimizer"))
        self.engine.load(Path(folder))
        checkpoint.set_rng_state(checkpoint.read_tensor(folder, "rng"))
        self.step_count, self.version = int(header["step"]), int(header["version"])
        self.samples_seen = int(header["samples_seen"])
        return dict(header.get("extra") or {})


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
