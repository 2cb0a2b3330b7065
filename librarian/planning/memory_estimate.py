"""One learner rank's GPU memory (GiB): the resident part (weights, gradients, optimizer states by ZeRO stage, the
KL reference, the CUDA runtime) plus the widest of the phases of an update, which are never alive together:

- `forward`: the layers' kept tensors (each layer's input under gradient checkpointing, else everything each
  layer keeps for backward), then the head's forward over one log-prob chunk; under autocast with float32
  weights, the bfloat16 copies of every weight (autocast caches them for the whole forward pass);
- `logprobs`: the head's backward, chunk by chunk (each chunk recomputed: its logits, log-probs, softmax and
  grammar mask kept, three float32 gradients of that size), with the layers' kept tensors still alive;
- `backward`: the layers' recompute and backward, one layer at a time (its kept tensors and the MLP's
  gradients); it starts only after the head's backward has ended;
- `reference` (with `loss.kl_coef` > 0): the reference policy's forward, without gradients, while the policy's
  kept tensors wait for backward;
- `step`: the optimizer step (foreach AdamW's temporary, ZeRO-1/2's float32 gradient partition).

`activation_memory` gives the per-token and per-chunk terms and says which inputs autograd keeps. A shape comes
from `model_shape`. Pure arithmetic with no import beyond the standard library: `scripts/gpu_check.py` measures
these phases on a bare GPU machine, `librarian plan` and `RLConfig.check` (`memory_check`) use the same figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from librarian.planning.activation_memory import (
    Attention,
    Chunk,
    Dtypes,
    Trained,
    checkpoint_input,
    first_layer_relief,
    head_backward,
    layer_saved,
    layer_working,
    rope_tables,
    weight_gradient,
)
from librarian.planning.model_shape import GIB, PROJECTIONS, ModelShape

RUNTIME_GIB = 2.5  # CUDA context, NCCL buffers, allocator slack: taken from every learner GPU
PHASES = ("forward", "logprobs", "backward", "reference", "step")


@dataclass(frozen=True)
class MicroBatch:
    """The largest micro-batch a learner rank runs: `tokens` padded tokens in rows of `seq_len`."""

    tokens: int
    seq_len: int
    trained: int = 0  # positions with a loss (0: every token, the planner's assumption)
    padded: bool = True  # rows of unequal length, so attention takes a mask (real batches are)
    constrained: bool = True  # some positions sampled under a grammar: their masks are unpacked per chunk

    @property
    def trained_tokens(self) -> int:
        return self.trained or self.tokens


@dataclass(frozen=True)
class LearnerMemory:
    """One learner rank's GPU memory (GiB): the resident parts and, per phase, what it holds on top of them."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    runtime: float
    phases: dict[str, float]  # GiB above the resident part at each phase's widest moment
    parts: dict[str, dict[str, float]] = field(default_factory=dict)  # what each phase holds, by part (GiB)
    micro_batch_tokens: int = 0
    trainable: int = 0
    step_gradients: float = 0.0  # ZeRO-1/2: the float32 copy of this rank's gradient partition at the step

    @property
    def resident(self) -> float:
        """What the rank holds between steps (weights, gradients, optimizer states, reference, runtime)."""
        return self.weights + self.gradients + self.optimizer + self.reference + self.runtime

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=lambda name: self.phases[name])

    @property
    def transient(self) -> float:
        """The widest phase (GiB above the resident part)."""
        return max(self.phases.values())

    @property
    def total(self) -> float:
        """The peak: the resident part plus the widest phase."""
        return self.resident + self.transient


def dtypes(learner: Any) -> Dtypes:
    """How wide `learner`'s tensors are: its precision, its engine and whether it trains full weights."""
    bf16 = learner.precision == "bf16"
    torch_engine = learner.engine != "deepspeed"
    full = not learner.lora.enabled
    return Dtypes(compute=2 if bf16 else 4, stream=4 if (not bf16 or (torch_engine and full)) else 2,
                  autocast=bf16 and torch_engine, lora_copies=bf16 and torch_engine)


def trained_weights(learner: Any) -> Trained:
    lora = learner.lora
    if not lora.enabled:
        return Trained(full=True)
    return Trained(full=False, lora=frozenset(t for t in lora.target_modules if t in PROJECTIONS), rank=lora.rank)


def _resident(shape: ModelShape, learner: Any, trainable: int) -> dict[str, float]:
    """Bytes of weights, gradients, optimizer states, reference and ZeRO's step partition on one rank."""
    ranks = max(1, int(learner.workers))
    params = shape.params
    bf16 = learner.precision == "bf16"
    act = 2 if bf16 else 4
    stage = learner.deepspeed.zero_stage if learner.engine == "deepspeed" else -1  # -1: torch, unpartitioned
    step = 0.0
    if learner.engine == "deepspeed":
        weights = params * act / (ranks if stage == 3 else 1)
        grads = trainable * act / (ranks if stage >= 2 else 1)
        states = trainable * (12 if bf16 else 8)  # float32 master copy (bf16 only) + AdamW's two moments
        optimizer = 0.0 if learner.deepspeed.offload_optimizer else states / (ranks if stage >= 1 else 1)
        if stage in (1, 2) and not learner.deepspeed.offload_optimizer:
            step = trainable * 4 / ranks  # flat_grad_partition.to(float32) before the optimizer step
    else:  # torch: float32 trainable parameters, gradients and moments; frozen weights as loaded
        weights = (params - trainable) * act + trainable * 4
        grads = trainable * 4
        optimizer = trainable * 8.0
    reference = 0.0
    if learner.loss.kl_coef > 0:
        reference = trainable * act if learner.lora.enabled else params * act
    return {"weights": weights, "gradients": grads, "optimizer": optimizer, "reference": reference, "step": step}


def _largest_trainable(shape: ModelShape, trained: Trained) -> int:
    """Elements of the largest trainable tensor (what a per-parameter optimizer step works on at once)."""
    if trained.full:
        return max(shape.vocab * shape.hidden, *(i * o for i, o in map(shape.projection, PROJECTIONS)))
    return max((trained.rank * max(shape.projection(p)) for p in trained.lora), default=0)


def _step(shape: ModelShape, learner: Any, trained: Trained, trainable: int, zero_partition: float) -> dict:
    """The optimizer step: foreach AdamW (torch on CUDA) makes a float32 copy of every second moment's square
    root; on the CPU it works tensor by tensor (two float32 temporaries of the largest); under DeepSpeed the
    rank's float32 gradient partition (ZeRO-1/2) and AdamW over its flat partition."""
    ranks = max(1, int(learner.workers))
    if learner.engine == "deepspeed":
        offloaded = learner.deepspeed.offload_optimizer
        return {"float32 gradient partition": zero_partition,
                "AdamW temporary": 0.0 if offloaded else 4.0 * trainable / ranks}
    if str(learner.device).startswith("cuda"):
        return {"AdamW temporary": 4.0 * trainable}
    return {"AdamW temporary": 8.0 * _largest_trainable(shape, trained)}


class Update:
    """The terms (bytes) of one update of `learner` on micro-batches like `batch`, and its phases built from them."""

    def __init__(self, shape: ModelShape, learner: Any, batch: MicroBatch) -> None:
        self.shape, self.dt, self.tr = shape, dtypes(learner), trained_weights(learner)
        self.n, self.t = batch.tokens, batch.trained_tokens
        self.checkpointed = bool(learner.gradient_checkpointing)
        self.per_layer = sum(layer_saved(shape, self.dt, self.tr, Attention(batch.padded, batch.seq_len)).values())
        self.chunked = learner.logprob_chunk > 0
        self.chunk = Chunk(min(learner.logprob_chunk, self.t) if self.chunked else self.t, shape.vocab,
                           batch.constrained)
        # autocast's bfloat16 copies of float32 weights: every layer's for the whole forward pass (its cache),
        # kept until backward without checkpointing; one layer's (and the head's, per chunk) in the recomputation
        full_casts = self.dt.autocast and self.tr.full
        lora = sum(self.tr.rank * sum(shape.projection(p)) for p in self.tr.lora)
        self.layer_cast = 2 * (shape.linear_params() if full_casts else lora) if self.dt.autocast else 0
        self.head_cast = 2 * shape.head_params if full_casts else 0

    @property
    def stack(self) -> dict[str, int]:
        """What the layers keep while backward has not reached them."""
        shape, n = self.shape, self.n
        if self.checkpointed:
            kept = {"layer inputs (checkpoints)": shape.layers * checkpoint_input(shape, self.dt) * n}
        else:
            kept = {"layers' kept tensors": (shape.layers * self.per_layer - first_layer_relief(shape, self.tr)) * n}
        return {**kept, "rotary tables": rope_tables(shape, self.dt) * n}

    @property
    def head(self) -> dict[str, int]:
        """What the final norm and the log-prob head keep besides a chunk."""
        h, stream = self.shape.hidden, self.dt.stream
        out = {"final norm and last hidden state": self.n * (4 * h + 4 + (stream * h if self.tr.full else 0)
                                                               + stream * h),
               "trained positions' hidden states": self.t * h * stream}
        if self.dt.autocast:
            out["a chunk's bfloat16 hidden states"] = self.chunk.rows * h * 2
        if not self.chunked:
            out["the whole batch's logits"] = self.dt.compute * self.n * self.shape.vocab
        return out

    def _working(self, checkpointed: bool) -> dict[str, int]:
        return layer_working(self.shape, self.dt, self.tr, checkpointed)

    def forward(self) -> dict[str, int]:
        """Widest in the last layer's MLP or in the head's first chunk."""
        head = sum(self.head.values()) + self.chunk.peak("forward")
        out = {"kept tensors": sum(self.stack.values()),
               "widest moment": max(self._working(self.checkpointed)["forward"] * self.n, head)}
        if self.tr.full and self.dt.autocast:
            out["autocast weight copies"] = self.shape.layers * self.layer_cast + self.head_cast
        return out

    def logprobs(self) -> dict[str, int]:
        """The head's backward, chunk by chunk, the layers' tensors waiting."""
        out = {**self.stack, **self.head, "hidden states' gradients": 2 * self.t * self.shape.hidden * self.dt.stream,
               "log-prob chunk (recomputed, backward)": head_backward(self.chunk, math.ceil(self.t / self.chunk.rows),
                                                                      self.shape, self.dt, self.tr)}
        if self.layer_cast and not self.checkpointed:
            out["autocast weight copies"] = self.shape.layers * self.layer_cast
        return out

    def backward(self) -> dict[str, int]:
        """The layers' backward from the last one down (recomputed first under checkpointing); with full weights
        the embedding's gradient comes last, when the layers' tensors are gone."""
        shape, dt, n = self.shape, self.dt, self.n
        out = self.stack
        if self.checkpointed:
            out["one layer recomputed"] = self.per_layer * n
        product = dt.compute * shape.intermediate * n  # the MLP product's gradient, when down_proj's weight's comes
        out["one layer's gradients"] = max(self._working(self.checkpointed)["backward"] * n,
                                           product + weight_gradient(shape, dt, self.tr))
        if self.layer_cast:
            out["autocast weight copies"] = self.layer_cast * (1 if self.checkpointed else shape.layers)
        if not self.tr.full:
            return out
        if shape.tied:  # the output layer's gradient waits in autograd's buffer for the embedding's
            out["tied output layer's gradient"] = dt.stream * shape.head_params
        embedding = {"embedding's gradient": dt.stream * shape.head_params + 2 * dt.stream * shape.hidden * n}
        return max(out, embedding, key=lambda terms: sum(terms.values()))

    def reference(self) -> dict[str, int]:
        """The reference policy's forward without gradients (nothing kept, one chunk at a time)."""
        idle = self._working(True)["forward"] * self.n
        selected = self.t * self.shape.hidden * self.dt.stream
        return {**self.stack, **self.head, "reference forward": max(idle, selected + self.chunk.peak("forward"))}


def learner_memory(shape: ModelShape, learner: Any, batch: MicroBatch) -> LearnerMemory:
    """The estimate for `learner` (a `LearnerConfig`) on micro-batches like `batch`."""
    update = Update(shape, learner, batch)
    trainable = shape.params if update.tr.full else shape.lora_params(update.tr.rank, sorted(update.tr.lora))
    resident = _resident(shape, learner, trainable)
    phases = {"forward": update.forward(), "logprobs": update.logprobs(), "backward": update.backward()}
    if learner.loss.kl_coef > 0:
        phases["reference"] = update.reference()
    phases["step"] = _step(shape, learner, update.tr, trainable, resident["step"])
    parts = {name: {k: b / GIB for k, b in terms.items()} for name, terms in phases.items()}
    return LearnerMemory(
        weights=resident["weights"] / GIB, gradients=resident["gradients"] / GIB,
        optimizer=resident["optimizer"] / GIB, reference=resident["reference"] / GIB, runtime=RUNTIME_GIB,
        phases={name: sum(p.values()) for name, p in parts.items()}, parts=parts, micro_batch_tokens=batch.tokens,
        trainable=trainable, step_gradients=resident["step"] / GIB)


def micro_batch_tokens(learner: Any, max_len: int) -> int:
    """Padded tokens of a rank's largest micro-batch: the token budget (at least one longest sequence), or its
    share of the batch (`batch_size` x `group_size` over the ranks) in `grad_accum` parts of `max_len`."""
    if learner.max_tokens_per_micro_batch > 0:
        return max(int(learner.max_tokens_per_micro_batch), max_len)
    per_rank = math.ceil(learner.batch_size * learner.group_size / max(1, learner.workers))
    return math.ceil(per_rank / max(1, learner.grad_accum)) * max_len


def planned_batch(learner: Any, max_len: int) -> MicroBatch:
    """The micro-batch `librarian plan` and the config check assume: the largest, rows of `max_len`, every
    token trained, padded, grammar-constrained (the widest case of each)."""
    return MicroBatch(micro_batch_tokens(learner, max_len), max_len)
