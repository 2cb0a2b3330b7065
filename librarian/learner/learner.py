"""The learner: one object a Ray actor can own.

`step(samples) -> metrics` runs one optimizer update over a batch of
`PolicySample`s (split into `grad_accum` micro-batches whose losses add up to
the loss of the whole batch), `publish_weights() -> (version, payload)`,
`save(dir)` / `load(dir)` with exact resume (weights, optimizer, RNG, step,
version, samples seen, the KL reference policy, and the caller's data position
in `extra`).

The KL reference (`loss.kl_coef > 0`) is the initial policy until
`freeze_reference()` snapshots the current one (SFT's `fine_tune` calls it at
its end, so GRPO regularises towards the fine-tuned policy, as in paper 002).
With LoRA the initial reference is the base model with the adapters disabled
and a frozen one lives in a second peft adapter (`lora.REFERENCE`,
adapter-sized, never trained or published); with full weights it is a frozen
deep copy of the model taken at construction (one more copy of every weight on
the learner's device, without gradients or optimizer state). Both are kept
only when `kl_coef > 0`; otherwise `freeze_reference()` does nothing.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from librarian.learner import checkpoint, lora
from librarian.learner.batch import PolicySample, collate, split
from librarian.learner.config import LearnerConfig, validate
from librarian.learner.constraints import disallowed_mask, mask_logits
from librarian.learner.errors import LearnerError
from librarian.learner.losses import (
    aggregate,
    batch_info,
    entropy_from_logits,
    kl_loss,
    policy_loss,
    token_logprobs,
)
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

    def __init__(self, model: Any, cfg: LearnerConfig | None = None, pad_id: int = 0,
                 tokenizer: Any = None) -> None:
        self.cfg = validate(cfg or LearnerConfig())
        self.tokenizer = tokenizer  # needed only for samples generated under a grammar (`learner.constraints`)
        # the reference's parameters exist before the engine takes (DeepSpeed: registers, partitions) the model
        self._ref_model = None  # full weights: a frozen copy of the model
        if not self.cfg.lora.enabled and self.cfg.loss.kl_coef > 0:
            self._ref_model = copy.deepcopy(model).requires_grad_(False)
        self.reference_frozen = False  # False: the reference is the initial policy
        with torch.random.fork_rng(devices=[]):  # seeded adapter init, the caller's RNG untouched
            torch.manual_seed(self.cfg.seed)
            if self.cfg.lora.enabled and self.cfg.loss.kl_coef > 0:  # LoRA: a frozen second adapter
                model = lora.wrap(model.to(self.cfg.device), self.cfg.lora)
                lora.add_frozen_adapter(model, self.cfg.lora)
            if self.cfg.gradient_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            self.engine = make_engine(model, self.cfg)
        self.pad_id = pad_id
        self.step_count = 0
        self.version = 0
        self.samples_seen = 0
        if self._ref_model is not None:
            self._ref_model.to(self.engine.device)

    @property
    def model(self) -> Any:
        return self.engine.module

    def _peft(self) -> Any:
        """The peft model (under DeepSpeed, the module its engine wraps)."""
        return self.model if lora.is_peft(self.model) else self.model.module

    def freeze_reference(self) -> None:
        """Make the current policy the KL reference from now on (call it after SFT; `fine_tune` does).

        LoRA: the trained adapter's weights are copied into the frozen `reference` adapter. Full weights: the
        frozen copy gets the current weights. A no-op when `kl_coef` is 0 (no reference is kept then). The
        optimizer never sees the reference's parameters."""
        if self.cfg.loss.kl_coef <= 0:
            return
        if self.cfg.lora.enabled:
            with self._gathered():
                lora.copy_adapter(self._peft(), lora.TRAINED, lora.REFERENCE)
        else:
            self._ref_model.load_state_dict(self.engine.trainable_state())
        self.reference_frozen = True

    def _gathered(self) -> Any:
        """ZeRO-3 partitions parameters: read or write them inside this (a no-op for other engines)."""
        gathered = getattr(self.engine, "_gathered", None)
        return gathered() if gathered is not None else contextlib.nullcontext()

    @contextmanager
    def _reference(self, base: bool = False) -> Iterator[Any]:
        """The reference policy's module to call inside; `base`: the initial policy (LoRA only)."""
        if self.cfg.lora.enabled:
            if self.reference_frozen and not base:
                with lora.active(self._peft(), lora.REFERENCE):
                    yield self.model
            else:
                with self.model.disable_adapter():
                    yield self.model
            return
        if base and self.reference_frozen:
            raise LearnerError("with full weights the initial policy is gone once the reference is frozen")
        if self._ref_model is None:
            raise LearnerError("no reference model: a full-weight learner keeps one only when "
                               "learner.loss.kl_coef > 0")  # not reached from `step`
        self._ref_model.train(self.model.training)
        yield self._ref_model

    def reference_kl(self, samples: Sequence[PolicySample], base: bool = False) -> float:
        """The KL term of `step` (`kl_type`, `agg_mode`) of the current policy to the reference on `samples`,
        without updating anything; `base=True` measures it to the initial policy instead (LoRA only)."""
        with torch.no_grad():
            batch = collate(samples, self.pad_id).to(self.engine.device)
            t, first = self._targets(batch)
            logp = token_logprobs(self._logits(batch.input_ids, batch.attention_mask, first), t["ids"])
            with self._reference(base) as reference:
                ref = token_logprobs(self._logits(batch.input_ids, batch.attention_mask, first, reference), t["ids"])
            loss_cfg = self.cfg.loss
            return float(kl_loss(logp, ref, t["mask"], loss_cfg.kl_type, loss_cfg.agg_mode, batch_info(t["mask"])))

    def _logits(self, ids: torch.Tensor, attention: torch.Tensor, first: int = 0, model: Any = None) -> torch.Tensor:
        """Next-token logits for target columns `first`.. (the vocabulary projection skips earlier positions)."""
        keep = ids.shape[1] - first
        out = (self.model if model is None else model)(input_ids=ids, attention_mask=attention, use_cache=False,
                                                        logits_to_keep=keep)
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
            forbidden = disallowed_mask(part, first, tuple(logits.shape), self.tokenizer)  # type: ignore[arg-type]
            logits = mask_logits(logits, forbidden)
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
                with torch.no_grad(), self._reference() as reference:
                    ref = token_logprobs(mask_logits(self._logits(batch.input_ids, batch.attention_mask, first,
                                                                  reference), forbidden), t["ids"])
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
                  "engine": self.cfg.engine, "lora": dataclasses.asdict(self.cfg.lora), "extra": extra or {},
                  "reference": "frozen" if self.reference_frozen else "initial",
                  "kl_reference": self.cfg.loss.kl_coef > 0}
        tensors = {"weights": self.engine.trainable_state(), "optimizer": self.engine.optimizer_state(),
                   "rng": checkpoint.rng_state()}
        if self.reference_frozen:
            tensors["reference"] = self._reference_state()
        return checkpoint.write(folder, header, tensors, self.engine.save)

    def _reference_state(self) -> dict[str, torch.Tensor]:
        """The frozen reference's tensors (detached CPU copies): adapter weights, or the full state dict."""
        if self.cfg.lora.enabled:
            with self._gathered():
                return lora.adapter_state(self._peft(), lora.REFERENCE)
        return {k: v.detach().cpu().clone() for k, v in self._ref_model.state_dict().items()}

    def _restore_reference(self, folder: str | Path, header: dict[str, Any]) -> None:
        """The reference of checkpoint `folder` (before DeepSpeed's module state, which holds a LoRA reference)."""
        frozen = header.get("reference", "initial") == "frozen"  # older checkpoints: the initial reference
        keeps = self.cfg.loss.kl_coef > 0
        if self.cfg.engine == "deepspeed" and self.cfg.lora.enabled and header.get("kl_reference", keeps) != keeps:
            raise LearnerError(f"checkpoint {folder} was written with{'' if not keeps else 'out'} a reference "
                               "adapter (learner.loss.kl_coef > 0) and DeepSpeed's module state must match; "
                               "resume with the same kl_coef sign")
        if frozen and keeps:
            state = checkpoint.read_tensor(folder, "reference")
            if self.cfg.lora.enabled:
                with self._gathered():
                    lora.load_adapter_state(self._peft(), state, lora.REFERENCE)
            else:
                self._ref_model.load_state_dict(state)
        elif self.reference_frozen and not self.cfg.lora.enabled:
            raise LearnerError(f"checkpoint {folder} has the initial reference, which this full-weight learner "
                               "no longer holds (it froze its reference); load it into a new learner")
        self.reference_frozen = frozen and keeps

    def load(self, folder: str | Path) -> dict[str, Any]:
        """Resume from `save`'s folder; returns its `extra`. The base model and config must match."""
        header = checkpoint.read_header(folder)
        if header["lora"] != dataclasses.asdict(self.cfg.lora) or header["engine"] != self.cfg.engine:
            raise LearnerError(f"checkpoint {folder} was written with engine {header['engine']!r} and lora "
                               f"{header['lora']}, this learner has {self.cfg.engine!r} and "
                               f"{dataclasses.asdict(self.cfg.lora)}")
        self.engine.load_trainable_state(checkpoint.read_tensor(folder, "weights"))
        self.engine.load_optimizer_state(checkpoint.read_tensor(folder, "optimizer"))
        self._restore_reference(folder, header)
        self.engine.load(Path(folder))
        checkpoint.set_rng_state(checkpoint.read_tensor(folder, "rng"))
        self.step_count, self.version = int(header["step"]), int(header["version"])
        self.samples_seen = int(header["samples_seen"])
        return dict(header.get("extra") or {})


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
