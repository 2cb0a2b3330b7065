"""The learner: one object a Ray actor can own.

`step(samples) -> metrics` runs one optimizer update over a batch of
`PolicySample`s (split into micro-batches, `grad_accum` of them or by the token
budget `max_tokens_per_micro_batch`, whose losses add up to the loss of the
whole batch; log-probs come from `logprobs.token_stats`, chunk by chunk), `publish_weights() -> (version, payload)`,
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

In a torch.distributed group of several ranks (`librarian.cluster.learner_group`)
each rank's `step` gets its share of the batch: the sample and token counts of
the whole batch are all-reduced first, so the loss normalisation is that of one
learner on the whole batch, and the metrics are all-reduced after, so every
rank returns the whole batch's. Every rank calls `step`, `publish_weights`,
`save`, `load` and `freeze_reference` together (ZeRO-3 gathers its partitioned
parameters collectively); `save` writes one folder from all ranks.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import checkpoint, lora, rng
from librarian.learner.batch import PolicySample, TensorBatch, collate, micro_batches, split, spread
from librarian.learner.config import LearnerConfig, validate
from librarian.learner.constraints import disallowed_mask, disallowed_rows, mask_logits
from librarian.learner.deepspeed_engine import DeepSpeedEngine
from librarian.learner.engine import TorchEngine, data_parallel
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
from librarian.learner.shared_prefix import PrefixPass, prefix_groups, suffix_sample
from librarian.learner.weights import WeightsPayload
from librarian.models.weight_transfer.payloads import this_node

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
        # the reference's parameters exist before the engine takes (DeepSpeed: registers, partitions) the model
        self._ref_model = None  # full weights: a frozen copy of the model
        if not self.cfg.lora.enabled and self.cfg.loss.kl_coef > 0:
            self._ref_model = copy.deepcopy(model).requires_grad_(False)
        self.reference_frozen = False  # False: the reference is the initial policy
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
        self.rank, self.world = data_parallel()  # the engine has joined (DeepSpeed: started) the process group
        if self._ref_model is not None:
            dtype = torch.bfloat16 if self.cfg.precision == "bf16" else torch.float32
            self._ref_model.to(self.engine.device, dtype=dtype)
        self.chunked = self.cfg.logprob_chunk > 0 and chunkable(self.engine.module)

    def all_reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """`values` summed (`op` 'sum') or their minimum ('min') over the learner group's ranks (float64)."""
        if self.world == 1:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.engine.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MIN)
        return t.tolist()

    def shard(self, samples: Sequence[PolicySample]) -> list[PolicySample]:
        """This rank's contiguous share of a batch every rank holds (all of it on a single learner)."""
        if self.world == 1:
            return list(samples)
        if len(samples) < self.world:
            raise LearnerError(f"a batch of {len(samples)} samples cannot be split over {self.world} learner ranks")
        return split(samples, self.world)[self.rank]

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
            logp, _ = self.token_stats(batch, t, first)
            with self._reference(base) as reference:
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
            count = int(-self.all_reduce([-len(parts)], "min")[0])  # the largest count over the ranks
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

    def step(self, samples: Sequence[PolicySample]) -> dict[str, float]:
        """One optimizer update over `samples`; returns loss, pg_loss, kl, entropy, grad_norm, tokens/s, ..."""
        if not samples:
            raise LearnerError("Learner.step needs at least one sample")
        start = time.perf_counter()
        trained = [sum(s.loss_mask[1:]) for s in samples]
        # the whole batch's counts (summed over the ranks' shares): the normalisation of one learner on all of it
        n, num_tokens, num_seqs = self.all_reduce([len(samples), sum(trained), sum(1 for k in trained if k)])
        info = {"dp_size": self.world, "batch_num_tokens": max(1, int(num_tokens)),
                "global_batch_size": max(1, int(num_seqs))}
        totals: dict[str, float] = {"loss": 0.0, "pg_loss": 0.0, "entropy": 0.0, "kl": 0.0}
        clip: dict[str, float] = {}
        tokens = 0
        loss_cfg = self.cfg.loss
        device = self.engine.device
        reference_opening: tuple[Any, Any] = (None, None)  # (the policy's opening, the reference's pass over it)
        for opening, part, weight in self._passes(samples):  # weight 0: a rank's filler pass (ZeRO-2/3)
            if part is None:  # a shared opening's suffixes are all done: backpropagate through the opening
                opening.finish()
                tokens += opening.length
                reference_opening = (None, None)
                continue
            batch = collate(part, self.pad_id).to(device)
            t, first = self._targets(batch)
            tokens += int(batch.attention_mask.sum()) if weight else 0
            extra = opening.inputs(batch.attention_mask.to(device)) if opening else None
            logp, entropy = self.token_stats(batch, t, first, part, entropy_grad=bool(loss_cfg.entropy_coef),
                                             model_inputs=extra)
            pg, metrics = policy_loss(t["old"], logp, t["adv"], t["mask"], loss_cfg, info)
            ent = aggregate(entropy, t["mask"], loss_cfg.agg_mode, info)
            loss = pg - loss_cfg.entropy_coef * ent if loss_cfg.entropy_coef else pg
            kl = torch.zeros(())
            if loss_cfg.kl_coef > 0:
                with torch.no_grad(), self._reference() as reference:
                    ref_inputs = None
                    if opening is not None:
                        if reference_opening[0] is not opening:
                            reference_opening = (opening, PrefixPass(reference, opening.token_ids, device,
                                                                     self.engine.autocast()))
                        ref_inputs = reference_opening[1].inputs(batch.attention_mask.to(device))
                    ref, _ = self.token_stats(batch, t, first, part, model=reference, model_inputs=ref_inputs)
                kl = kl_loss(logp, ref, t["mask"], loss_cfg.kl_type, loss_cfg.agg_mode, info)
                loss = loss + loss_cfg.kl_coef * kl
            self.engine.backward(loss * weight)
            share = weight * len(part) / n
            # each rank's loss is scaled by dp_size (gradients are averaged over ranks): its share is loss / dp_size
            totals["loss"] += weight * float(loss.detach()) / self.world
            totals["pg_loss"] += weight * float(pg.detach()) / self.world
            totals["entropy"] += weight * float(ent.detach()) / self.world
            totals["kl"] += weight * float(kl.detach()) / self.world
            for k, v in metrics.items():
                clip[k] = clip.get(k, 0.0) + share * v
        keys = sorted(totals) + sorted(clip)
        summed = self.all_reduce([{**totals, **clip}[k] for k in keys] + [tokens])
        totals = {k: summed[i] for i, k in enumerate(keys) if k in totals}
        clip = {k: summed[i] for i, k in enumerate(keys) if k in clip}
        tokens = int(summed[-1])
        grad_norm = self.engine.step()
        if not all(map(_finite, totals.values())) or not _finite(grad_norm):
            raise LearnerError(f"non-finite loss or gradient at step {self.step_count + 1}: {totals}, "
                               f"grad_norm={grad_norm}")
        self.step_count += 1
        self.version += 1
        self.samples_seen += int(n)
        none = float(2**52)  # no sample with a known version
        oldest = self.all_reduce([min((s.policy_version for s in samples if s.policy_version >= 0), default=none)],
                                 "min")[0]
        wall = time.perf_counter() - start
        return {**totals, **clip, "grad_norm": grad_norm, "tokens": float(tokens),
                "trained_tokens": float(info["batch_num_tokens"]), "tokens_per_s": tokens / max(wall, 1e-9),
                "learner_s": wall, "step": float(self.step_count), "version": float(self.version),
                "staleness": float(self.version - 1 - oldest) if oldest < none else 0.0}

    def publish_weights(self) -> tuple[int, WeightsPayload]:
        """The current policy as (version, payload); the version grows by one per step."""
        if not self.cfg.lora.enabled:
            return self.version, WeightsPayload(self.version, "full", self.engine.trainable_state(), node=this_node())
        if self.cfg.lora.publish == "merged":
            state = lora.merged_state(lora.hf_model(self.engine.module))
            return self.version, WeightsPayload(self.version, "full", state, node=this_node())
        shape = {k: v for k, v in self.cfg.lora.shape().items() if k != "enabled"}
        payload = WeightsPayload(self.version, "lora", self.engine.trainable_state(), shape, node=this_node())
        return self.version, payload

    def save(self, folder: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """A checkpoint that `load` resumes exactly; `extra` (JSON) holds e.g. the data position."""
        header = {"step": self.step_count, "version": self.version, "samples_seen": self.samples_seen,
                  "engine": self.cfg.engine, "lora": self.cfg.lora.shape(), "extra": extra or {},
                  "reference": "frozen" if self.reference_frozen else "initial",
                  "kl_reference": self.cfg.loss.kl_coef > 0, "world_size": self.world}
        tensors: dict[str, Any] = {checkpoint.rng_stem(self.rank): checkpoint.rng_state()}
        if self.rank == 0 or getattr(self.engine, "partitioned", False):  # ZeRO-3: every rank joins the gather
            tensors.update(weights=self.engine.trainable_state(), optimizer=self.engine.optimizer_state())
            if self.reference_frozen:
                tensors["reference"] = self._reference_state()
        if self.world == 1:
            return checkpoint.write(folder, header, tensors, self.engine.save)
        return self._save_group(Path(folder), header, tensors)

    def _save_group(self, folder: Path, header: dict[str, Any], tensors: dict[str, Any]) -> Path:
        """Every rank writes into one staged folder; rank 0 commits it once all ranks' files are there."""
        import torch.distributed as dist

        box = [str(checkpoint.stage(folder)) if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        tmp = Path(box[0])
        local = None
        try:
            self.engine.save(tmp)  # collective; DeepSpeed: each rank writes its partition
            if self.rank:
                torch.save(tensors[checkpoint.rng_stem(self.rank)], tmp / f"{checkpoint.rng_stem(self.rank)}.pt")
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it, or the others wait forever
            local = f"learner rank {self.rank} could not write checkpoint {folder}: {exc!r}"
        errors: list[Any] = [None] * self.world
        dist.all_gather_object(errors, local)
        verdict = [next((e for e in errors if e), None)]
        if self.rank == 0 and verdict[0] is None:
            missing = [r for r in range(1, self.world) if not (tmp / f"{checkpoint.rng_stem(r)}.pt").is_file()]
            if missing:
                verdict[0] = (f"checkpoint {folder}: learner ranks {missing} wrote their files elsewhere; put "
                              "checkpoints on a filesystem every learner node shares")
            else:
                try:
                    checkpoint.commit(tmp, folder, header, tensors)
                except Exception as exc:  # noqa: BLE001
                    verdict[0] = f"learner rank 0 could not write checkpoint {folder}: {exc!r}"
        if self.rank == 0 and verdict[0] is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0] is not None:
            raise LearnerError(verdict[0])
        return folder

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
        saved_lora = {k: v for k, v in header["lora"].items() if k != "publish"}
        if saved_lora != self.cfg.lora.shape() or header["engine"] != self.cfg.engine:
            raise LearnerError(f"checkpoint {folder} was written with engine {header['engine']!r} and lora "
                               f"{saved_lora}, this learner has {self.cfg.engine!r} and {self.cfg.lora.shape()}")
        saved_world = int(header.get("world_size", 1))
        if self.cfg.engine == "deepspeed" and saved_world != self.world:
            raise LearnerError(f"checkpoint {folder} was written by {saved_world} DeepSpeed learner ranks and its "
                               f"optimizer state is partitioned {saved_world} ways; resume with learner.workers="
                               f"{saved_world} (this group has {self.world})")
        self.engine.load_trainable_state(checkpoint.read_tensor(folder, "weights"))
        self.engine.load_optimizer_state(checkpoint.read_tensor(folder, "optimizer"))
        self._restore_reference(folder, header)
        self.engine.load(Path(folder))
        stem = checkpoint.rng_stem(self.rank)
        checkpoint.set_rng_state(checkpoint.read_tensor(folder, stem if (Path(folder) / f"{stem}.pt").is_file()
                                                        else "rng"))
        self.step_count, self.version = int(header["step"]), int(header["version"])
        self.samples_seen = int(header["samples_seen"])
        return dict(header.get("extra") or {})


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")
