"""The learner: one object a Ray actor can own.

`step(samples) -> metrics` runs one optimizer update over a batch of
`PolicySample`s (split into micro-batches, `grad_accum` of them or by the token
budget `max_tokens_per_micro_batch`, whose losses add up to the loss of the
whole batch; log-probs come from `logprobs.token_stats`, chunk by chunk), `publish_weights() -> (version, payload)`,
`save(dir)` / `load(dir)` with exact resume (weights, optimizer, RNG, step,
version, samples seen, the KL reference policy, and the caller's data position
in `extra`). The KL reference (`loss.kl_coef > 0`) is `reference.KLReference`'s:
the initial policy until `freeze_reference()` (SFT's `fine_tune` calls it).

In a torch.distributed group of several ranks (`librarian.cluster.learner_group`)
each rank's `step` gets its share of the batch, and the whole batch's counts and
metrics are all-reduced (`data_parallel`). Every rank calls `step`,
`publish_weights`, `save`, `load` and `freeze_reference` together (ZeRO-3
gathers its partitioned parameters collectively). Beside this module: what is
published (`publish`), the checkpoint of one learner or of every rank of a group
(`learner_checkpoint`), the shared-prefix passes (`shared_prefix`), the KL
reference (`reference`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import learner_checkpoint, lora, rng
from librarian.learner.batch import PolicySample, TensorBatch, collate, micro_batches, spread
from librarian.learner.config import LearnerConfig, validate
from librarian.learner.constraints import disallowed_mask, disallowed_rows, mask_logits
from librarian.learner.data_parallel import NO_VERSION, Ranks, UpdateTotals
from librarian.learner.deepspeed_engine import DeepSpeedEngine
from librarian.learner.engine import TorchEngine
from librarian.learner.errors import LearnerError
from librarian.learner.logprobs import chunkable, token_stats
from librarian.learner.losses import (
    aggregate,
    batch_info,
    entropy_from_logits,
    kl_loss,
    policy_loss,
    token_logprobs,
)
from librarian.learner.publish import policy_payload
from librarian.learner.reference import KLReference, peft_model
from librarian.learner.shared_prefix import PrefixPass, ReferenceOpenings, prefix_groups, suffix_sample
from librarian.learner.weights import WeightsPayload

log = logging.getLogger(__name__)


def make_engine(model: Any, cfg: LearnerConfig) -> Any:
    """The engine `cfg.engine` around `model`."""
    if cfg.engine == "deepspeed":
        return DeepSpeedEngine(model, cfg)

    return TorchEngine(model, cfg)


class Learner:
    """GRPO updates on a causal LM (LoRA or full weights), with weight publishing and checkpoints."""

    def __init__(self, model: Any, cfg: LearnerConfig | None = None, pad_id: int = 0,
                 tokenizer: Any = None) -> None:
        self.cfg = validate(cfg or LearnerConfig())
        self.tokenizer = tokenizer  # needed only for samples generated under a grammar (`learner.constraints`)
        self.reference = KLReference(model, self.cfg)  # before the engine takes (DeepSpeed: partitions) it
        with rng.seeded(self.cfg.seed, rng.cuda_devices(self.cfg.device)):  # seeded init, the caller's RNG untouched
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
        self.ranks = Ranks.joined(self.engine.device)  # the engine has joined (DeepSpeed: started) the group
        self.reference.attach(self.engine)
        self.chunked = self.cfg.logprob_chunk > 0 and chunkable(self.engine.module)

    @property
    def rank(self) -> int:
        return self.ranks.rank

    @property
    def world(self) -> int:
        return self.ranks.world

    @property
    def model(self) -> Any:
        return self.engine.module

    def _peft(self) -> Any:
        """The peft model (under DeepSpeed, the module its engine wraps)."""
        return peft_model(self.model)

    @property
    def reference_frozen(self) -> bool:
        """Whether the KL reference is a frozen policy (False: the initial one)."""
        return self.reference.frozen

    @reference_frozen.setter
    def reference_frozen(self, frozen: bool) -> None:
        self.reference.frozen = frozen

    def freeze_reference(self) -> None:
        """Make the current policy the KL reference from now on (call it after SFT; `fine_tune` does); a no-op
        when `kl_coef` is 0."""
        self.reference.freeze()

    def reference_kl(self, samples: Sequence[PolicySample], base: bool = False) -> float:
        """The KL term of `step` (`kl_type`, `agg_mode`) of the current policy to the reference on `samples`,
        without updating anything; `base=True` measures it to the initial policy instead (LoRA only)."""
        with torch.no_grad():
            batch = collate(samples, self.pad_id).to(self.engine.device)
            t, first = self._targets(batch)
            logp, _ = self.token_stats(batch, t, first)
            with self.reference.module(base) as reference:
                ref, _ = self.token_stats(batch, t, first, model=reference)
            loss_cfg = self.cfg.loss
            return float(kl_loss(logp, ref, t["mask"], loss_cfg.kl_type, loss_cfg.agg_mode, batch_info(t["mask"])))

    def sequence_logprobs(self, samples: Sequence[PolicySample]) -> list[float]:
        """Each sample's summed log-prob of its trained tokens under the current policy (grammar masks applied),
        one sample at a time, without gradients: how far an update moved whole trajectories."""
        out = []
        with torch.no_grad():
            for sample in samples:
                batch = collate([sample], self.pad_id).to(self.engine.device)
                t, first = self._targets(batch)
                logp, _ = self.token_stats(batch, t, first, [sample])
                out.append(float((logp * t["mask"]).sum()))
        return out

    def _logits(self, ids: torch.Tensor, attention: torch.Tensor, first: int = 0, model: Any = None,
                temperature: float | None = None, model_inputs: dict[str, Any] | None = None) -> torch.Tensor:
        """Next-token logits (float32, the whole batch) for target columns `first`.. (the plain path)."""
        keep = ids.shape[1] - first
        inputs = {"attention_mask": attention, **(model_inputs or {})}
        with self.engine.autocast():
            out = (self.model if model is None else model)(input_ids=ids, use_cache=False, logits_to_keep=keep,
                                                            **inputs)
        return out.logits[:, -keep:-1].float() / (self.cfg.temperature if temperature is None else temperature)

    def token_stats(self, batch: TensorBatch, t: dict[str, torch.Tensor], first: int, samples: Any = None,
                    model: Any = None, rows: torch.Tensor | None = None,
                    entropy_grad: bool = False, temperature: float | None = None,
                    model_inputs: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs of the target tokens and the entropies, (batch, columns), at the trained positions (`rows`,
        default the loss mask; 0 elsewhere): chunk by chunk (`logprob_chunk`), or from the whole batch's logits,
        at `temperature` (default `learner.temperature`). `samples` bring their grammar masks; `model_inputs`
        go to the model too (a shared opening's cache)."""
        temperature = self.cfg.temperature if temperature is None else temperature
        rows = t["mask"] > 0 if rows is None else rows
        module = self.model if model is None else model
        if self.chunked and (model is None or chunkable(module)):
            head = lora.hf_model(module).get_output_embeddings()
            # packed, on the batch's device (chunked_stats moves them to the hidden states' if that differs)
            banned = disallowed_rows(samples, first, rows, head.out_features, self.tokenizer) if samples else None
            with self.engine.autocast():
                return token_stats(module, batch.input_ids, batch.attention_mask, first, t["ids"], rows,
                                   temperature, self.cfg.logprob_chunk, banned, model_inputs)
        logits = self._logits(batch.input_ids, batch.attention_mask, first, model, temperature, model_inputs)
        if samples:
            logits = mask_logits(logits, disallowed_mask(samples, first, tuple(logits.shape), self.tokenizer,
                                                         logits.device))
        keep = rows.float()
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = entropy_from_logits(logits) * keep
        return token_logprobs(logits, t["ids"]) * keep, entropy

    def micro_batches(self, samples: Sequence[PolicySample]) -> list[tuple[list[PolicySample], float]]:
        """This rank's micro-batches with their weights: `grad_accum` parts, or by the token budget. Under
        ZeRO-2/3 every rank runs as many as the rank that needs most; one with too few samples repeats its
        first at weight 0 (the forward and backward passes happen, the gradient is nothing)."""
        cfg = self.cfg
        parts = micro_batches(samples, cfg.grad_accum, cfg.max_tokens_per_micro_batch)
        if self.world > 1 and getattr(self.engine, "equal_micro_batches", False):
            count = int(-self.ranks.all_reduce([-len(parts)], "min")[0])  # the largest count over the ranks
            parts = spread(parts, count)
            return [(p, 1.0) for p in parts] + [([samples[0]], 0.0)] * (count - len(parts))
        return [(p, 1.0) for p in parts]

    def _passes(self, samples: Sequence[PolicySample]) -> Iterator[tuple[Any, list[PolicySample] | None, float]]:
        """(shared opening or None, micro-batch, weight) of an update, then (opening, None, 0) once an opening's
        micro-batches are done. With `learner.shared_prefix` > 0, samples that share an opening of at least that
        many tokens run it once (`shared_prefix.PrefixPass`) and their micro-batches hold the suffixes."""
        if not self.cfg.shared_prefix:
            for part, weight in self.micro_batches(samples):
                yield None, part, weight
            return
        for length, members in prefix_groups(samples, self.cfg.shared_prefix):
            opening = None
            if length:
                opening = PrefixPass(self.model, members[0].token_ids[:length], self.engine.device,
                                     self.engine.autocast())
            for part, weight in self.micro_batches([suffix_sample(s, length) for s in members]):
                yield opening, part, weight
            if opening is not None:
                yield opening, None, 0.0

    @staticmethod
    def _targets(batch: Any) -> tuple[dict[str, torch.Tensor], int]:
        t = batch.targets()
        cols = torch.nonzero(t["mask"].sum(dim=0) > 0)
        first = int(cols[0]) if len(cols) else 0
        return {k: v[:, first:] for k, v in t.items()}, first

    # ----- the update
    def step(self, samples: Sequence[PolicySample]) -> dict[str, float]:
        """One optimizer update over `samples`; returns loss, pg_loss, kl, entropy, grad_norm, tokens/s, ..."""
        if not samples:
            raise LearnerError("Learner.step needs at least one sample")
        start = time.perf_counter()
        n, info = self.ranks.whole_batch(samples)  # every rank normalises as one learner on the whole batch
        totals = UpdateTotals()
        openings = ReferenceOpenings()
        for opening, part, weight in self._passes(samples):  # weight 0: a rank's filler pass (ZeRO-2/3)
            if part is None:  # a shared opening's suffixes are all done: backpropagate through the opening
                opening.finish()
                totals.tokens += opening.length
                openings.forget()
                continue
            batch = collate(part, self.pad_id).to(self.engine.device)
            totals.tokens += int(batch.attention_mask.sum()) if weight else 0
            loss, terms, metrics = self._loss(batch, part, opening, openings, info)
            self.engine.backward(loss * weight)
            totals.add({k: float(v.detach()) for k, v in terms.items()}, metrics, weight, weight * len(part) / n,
                       self.world)
        totals = totals.summed(self.ranks)
        grad_norm = self.engine.step()
        if not all(map(_finite, totals.terms.values())) or not _finite(grad_norm):
            raise LearnerError(f"non-finite loss or gradient at step {self.step_count + 1}: {totals.terms}, "
                               f"grad_norm={grad_norm}")
        self.step_count += 1
        self.version += 1
        self.samples_seen += n
        oldest = self.ranks.oldest_version(samples)
        wall = time.perf_counter() - start
        return {**totals.terms, **totals.clip, "grad_norm": grad_norm, "tokens": float(totals.tokens),
                "trained_tokens": float(info["batch_num_tokens"]), "tokens_per_s": totals.tokens / max(wall, 1e-9),
                "learner_s": wall, "step": float(self.step_count), "version": float(self.version),
                "staleness": float(self.version - 1 - oldest) if oldest < NO_VERSION else 0.0}

    def _loss(self, batch: TensorBatch, part: list[PolicySample], opening: PrefixPass | None,
              openings: ReferenceOpenings, info: dict[str, int]) -> tuple[torch.Tensor, dict[str, torch.Tensor],
                                                                          dict[str, float]]:
        """One micro-batch's loss (policy loss, minus the entropy bonus, plus the KL to the reference), its terms
        and the policy loss's clip metrics."""
        loss_cfg = self.cfg.loss
        t, first = self._targets(batch)
        extra = opening.inputs(batch.attention_mask.to(self.engine.device)) if opening else None
        logp, entropy = self.token_stats(batch, t, first, part, entropy_grad=bool(loss_cfg.entropy_coef),
                                         model_inputs=extra)
        pg, metrics = policy_loss(t["old"], logp, t["adv"], t["mask"], loss_cfg, info)
        ent = aggregate(entropy, t["mask"], loss_cfg.agg_mode, info)
        loss = pg - loss_cfg.entropy_coef * ent if loss_cfg.entropy_coef else pg
        kl = torch.zeros(())
        if loss_cfg.kl_coef > 0:
            ref = self._reference_logprobs(batch, t, first, part, opening, openings)
            kl = kl_loss(logp, ref, t["mask"], loss_cfg.kl_type, loss_cfg.agg_mode, info)
            loss = loss + loss_cfg.kl_coef * kl
        return loss, {"loss": loss, "pg_loss": pg, "entropy": ent, "kl": kl}, metrics

    def _reference_logprobs(self, batch: TensorBatch, t: dict[str, torch.Tensor], first: int,
                            part: list[PolicySample], opening: PrefixPass | None,
                            openings: ReferenceOpenings) -> torch.Tensor:
        """The reference policy's log-probs of a micro-batch (no gradient), through its own pass over a shared
        opening."""
        device = self.engine.device
        with torch.no_grad(), self.reference.module() as reference:
            extra = openings.inputs(opening, reference, batch.attention_mask.to(device), device, self.engine.autocast)
            ref, _ = self.token_stats(batch, t, first, part, model=reference, model_inputs=extra)
        return ref

    # ----- publishing and checkpoints
    def publish_weights(self) -> tuple[int, WeightsPayload]:
        """The current policy as (version, payload); the version grows by one per step."""
        return self.version, policy_payload(self.cfg, self.engine, self.version)

    def save(self, folder: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """A checkpoint that `load` resumes exactly; `extra` (JSON) holds e.g. the data position."""
        return learner_checkpoint.save(self, folder, extra)

    def load(self, folder: str | Path) -> dict[str, Any]:
        """Resume from `save`'s folder; returns its `extra`. The base model and config must match."""
        return learner_checkpoint.load(self, folder)


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
