"""What a learner's passes hold besides the weights, in bytes: per token of a micro-batch for a decoder layer,
per element of a (rows x vocab) chunk for the log-prob head. Pure arithmetic; `memory_estimate` puts the pieces
together into phases.

Autograd keeps a tensor only for a gradient it must compute: a frozen projection (the base weight under LoRA)
needs its weight, not its input, so its input is kept only when something else needs it (a trained or LoRA
projection reading the same tensor; the LoRA branch reads the same input as its frozen base). Under
`torch.autocast` every projection whose input is float32 makes its own bfloat16 copy and keeps that; with
float32 LoRA weights (the torch engine's masters) peft casts a bfloat16 input up to float32 and autocast back
down, again one copy per projection. These rules reproduce the CPU allocator's figures for a Qwen2 layer to the
byte (`tests/planning/test_memory_phases.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from librarian.planning.model_shape import PROJECTIONS, ModelShape

ROPE_TABLES = 2  # cos and sin, (tokens, head dim) in the stream's dtype, shared by every layer


@dataclass(frozen=True)
class Dtypes:
    """How wide a learner's tensors are (bytes per element)."""

    compute: int  # a projection's output: 2 under bf16 (autocast or bf16 weights), 4 in fp32
    stream: int  # the residual stream, the embedding's dtype: 4 when the torch engine trains full weights
    # (float32 masters under autocast) or in fp32, else 2
    autocast: bool  # torch.autocast casts float32 inputs and weights for each projection
    lora_copies: bool  # float32 LoRA weights over a bfloat16 stream: each LoRA projection keeps its own copy


@dataclass(frozen=True)
class Trained:
    """Which weights train: all of them, or LoRA adapters on some projections."""

    full: bool
    lora: frozenset[str] = frozenset()
    rank: int = 0

    def reads_input(self, projection: str) -> bool:
        """Whether backward needs this projection's input (its weight or its LoRA branch trains)."""
        return self.full or projection in self.lora

    def own_copy(self, projection: str, dt: Dtypes) -> bool:
        """Whether the projection keeps a copy of its input of its own rather than the shared tensor."""
        if self.full:
            return dt.autocast and dt.stream != dt.compute  # autocast's bfloat16 copy of a float32 input
        return projection in self.lora and dt.lora_copies


@dataclass(frozen=True)
class Attention:
    """The attention path: `padded` rows make transformers pass a 4-D mask, so SDPA gets key and value repeated
    to every head and keeps an additive copy of the mask per layer (`seq_len` x `seq_len` per row)."""

    padded: bool = False
    seq_len: int = 0


def _inputs(trained: Trained, dt: Dtypes, projections: tuple[str, ...], width: int) -> int:
    """Bytes per token kept of the tensor that `projections` read: each one's own copy, or the tensor once."""
    reading = [p for p in projections if trained.reads_input(p)]
    own = sum(1 for p in reading if trained.own_copy(p, dt))
    shared = any(not trained.own_copy(p, dt) for p in reading)
    return own * dt.compute * width + (dt.stream * width if shared else 0)


def _norm(shape: ModelShape, dt: Dtypes, trained: Trained) -> int:
    """An RMSNorm: its float32 input and 1/rms; with a trained weight also the normalised tensor it scales."""
    return 4 * shape.hidden + 4 + (dt.stream * shape.hidden if trained.full else 0)


def layer_saved(shape: ModelShape, dt: Dtypes, trained: Trained, attention: Attention) -> dict[str, int]:
    """Bytes per token one layer keeps for its backward pass, by part."""
    a, h, q = dt.compute, shape.hidden, shape.q_dim
    kv = q if attention.padded else shape.kv_dim  # repeat_kv: with a mask, SDPA gets every head's keys and values
    lora_out = dt.compute * trained.rank * len(trained.lora)  # lora_A's output, read by lora_B
    o_copy = a * q if (not trained.full and trained.own_copy("o_proj", dt)) else 0  # else SDPA's output, kept anyway
    return {
        "norms": 2 * _norm(shape, dt, trained),
        "q/k/v inputs": _inputs(trained, dt, ("q_proj", "k_proj", "v_proj"), h),
        "attention (q, k, v, output, log-sum-exp)": a * (2 * q + 2 * kv) + 4 * shape.heads,
        "attention mask": a * attention.seq_len if attention.padded else 0,
        "o_proj input": o_copy,
        "gate/up inputs": _inputs(trained, dt, ("gate_proj", "up_proj"), h),
        "mlp (gate, activation, up)": 3 * a * shape.intermediate,
        "down_proj input": a * shape.intermediate if trained.reads_input("down_proj") else 0,
        "lora": lora_out,
    }


def first_layer_relief(shape: ModelShape, trained: Trained) -> int:
    """Bytes per token the first layer keeps less: with a frozen embedding its input needs no gradient, so its
    input norm keeps nothing."""
    return 0 if trained.full else 4 * shape.hidden + 4


def checkpoint_input(shape: ModelShape, dt: Dtypes) -> int:
    """Bytes per token a checkpointed layer keeps: its input."""
    return dt.stream * shape.hidden


def rope_tables(shape: ModelShape, dt: Dtypes) -> int:
    """Bytes per token of the rotary tables every layer reads (kept once)."""
    return ROPE_TABLES * dt.stream * shape.dim


def layer_working(shape: ModelShape, dt: Dtypes, trained: Trained, checkpointed: bool) -> dict[str, int]:
    """Bytes per token a layer holds beyond what it keeps, at its widest moment, with the residual and the
    stream's gradients: in the forward pass the MLP's activation, up projection and product (under checkpointing
    nothing is kept, so all three are extra; else only the product, when down_proj does not keep it); in backward
    the three MLP gradients alive at the product's backward (down_proj's kept input already released)."""
    a, i, h = dt.compute, shape.intermediate, shape.hidden
    product = 0 if trained.reads_input("down_proj") else a * i
    return {"forward": (3 * a * i if checkpointed else product) + 2 * dt.stream * h,
            "backward": 3 * a * i - (a * i - product) + 2 * dt.stream * h}


def weight_gradient(shape: ModelShape, dt: Dtypes, trained: Trained) -> int:
    """Bytes of the largest projection's gradient before it is added to `.grad`: under autocast a bfloat16
    gradient and its float32 copy; otherwise one gradient in the weights' dtype; none for frozen weights."""
    if not trained.full:
        return 0
    biggest = max(i * o for i, o in map(shape.projection, PROJECTIONS))
    return (2 + 4 if dt.autocast else dt.compute) * biggest


def head_backward(chunk: Chunk, chunks: int, shape: ModelShape, dt: Dtypes, trained: Trained) -> int:
    """Bytes of the head's backward over `chunks` chunks like `chunk`. A frozen output layer adds nothing. A
    trained one gets one gradient, summed over the chunks in autograd's buffer, which the later chunks find
    alive: under autocast the chunks share the forward's bfloat16 copy of the weight, so the buffer is bfloat16,
    each recomputed chunk holds a new copy, and at the end the buffer and its float32 copy meet; otherwise the
    buffer is in the weights' dtype and meets each new chunk's gradient and the logits' gradient."""
    weight = shape.head_params
    earlier = 1 if chunks > 1 else 0
    if not trained.full:
        return chunk.peak("backward")
    if dt.autocast:
        return max(chunk.peak("backward") + (1 + earlier) * 2 * weight, (2 + 4) * weight)
    return max(chunk.peak("backward") + earlier * dt.compute * weight,
               4 * chunk.elements + (1 + earlier) * dt.compute * weight)


@dataclass(frozen=True)
class Chunk:
    """One chunk of the log-prob head: `rows` trained positions projected to `vocab` logits."""

    rows: int
    vocab: int
    constrained: bool = True  # grammar masks unpacked in this chunk

    @property
    def elements(self) -> int:
        return self.rows * self.vocab

    def moments(self) -> dict[str, int]:
        """Bytes alive at the chunk's widest moments (each is recomputed in backward, so the same moments come
        twice): `unpack` (the float32 logits, the bool mask, and `unpack_bitmask`'s two int32 (rows, words, 32)
        temporaries), `forward` (logits, log-probs, softmax and softmax x logits, float32, with the mask), and
        `backward` (the logits, log-probs and softmax that the recomputation keeps, three float32 gradients of
        that size, and the mask)."""
        mask = self.elements if self.constrained else 0
        padded = self.rows * 32 * ((self.vocab + 31) // 32)
        return {"unpack": 4 * self.elements + mask + 8 * padded if self.constrained else 0,
                "forward": 16 * self.elements + mask,
                "backward": 24 * self.elements + mask}

    def peak(self, phase: str) -> int:
        """The chunk's peak in the forward pass (`forward`) or in its recomputation and backward (`backward`)."""
        m = self.moments()
        return max(m["unpack"], m[phase])
