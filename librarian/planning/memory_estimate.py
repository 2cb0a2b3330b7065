"""Per-GPU memory estimates: a learner rank (weights, gradients, optimizer states by ZeRO stage, activations by
micro-batch tokens with and without gradient checkpointing, the log-prob computation, ZeRO-1/2's transient
float32 gradient partition at the optimizer step) and a vLLM engine (weights, LoRA slots, activations, KV cache
at its `gpu_memory_utilization`).

The model's shape comes from its `config.json` (a folder that exists here) or from a known architecture by
name; the formulas are the usual back-of-the-envelope ones (ZeRO's 2 + 2 + 12 bytes per parameter in mixed
precision; a transformer layer's saved activations per token), meant to tell 40 GB from 400 GB, not to the
last gigabyte. Every figure is in GiB.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from librarian.config import ConfigError

GIB = float(1 << 30)
RUNTIME_GIB = 2.5  # CUDA context, NCCL buffers, allocator slack: taken from every learner GPU
VLLM_RUNTIME_GIB = 1.5  # CUDA context and graphs of a vLLM engine, outside its activations and KV cache
LOGPROB_COPIES = 3  # float32 vocabulary-wide tensors alive per projected position (logits, softmax, grad)
LORA_MODULES = 4  # vLLM keeps LoRA slots for qkv, o, gate_up and down


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool = False
    head_dim: int = 0  # 0: hidden / heads
    qkv_bias: bool = False

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.dim

    def layer_params(self) -> int:
        q = self.hidden * self.heads * self.dim
        kv = 2 * self.hidden * self.kv_dim
        bias = (self.heads * self.dim + 2 * self.kv_dim) if self.qkv_bias else 0
        return q + kv + bias + self.heads * self.dim * self.hidden + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return embed + self.layers * self.layer_params() + self.hidden

    def lora_params(self, rank: int, targets: list[str]) -> int:
        """Trainable LoRA parameters: rank x (in + out) of each targeted projection in every layer."""
        sizes = {"q_proj": (self.hidden, self.heads * self.dim), "k_proj": (self.hidden, self.kv_dim),
                 "v_proj": (self.hidden, self.kv_dim), "o_proj": (self.heads * self.dim, self.hidden),
                 "gate_proj": (self.hidden, self.intermediate), "up_proj": (self.hidden, self.intermediate),
                 "down_proj": (self.intermediate, self.hidden)}
        return self.layers * sum(rank * sum(sizes[t]) for t in targets if t in sizes)


KNOWN = {
    "qwen2.5-0.5b": ModelShape("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, True, qkv_bias=True),
    "qwen2.5-1.5b": ModelShape("qwen2.5-1.5b", 28, 1536, 12, 2, 8960, 151936, True, qkv_bias=True),
    "qwen2.5-3b": ModelShape("qwen2.5-3b", 36, 2048, 16, 2, 11008, 151936, True, qkv_bias=True),
    "qwen2.5-7b": ModelShape("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, False, qkv_bias=True),
    "qwen2.5-14b": ModelShape("qwen2.5-14b", 48, 5120, 40, 8, 13824, 152064, False, qkv_bias=True),
    "qwen2.5-32b": ModelShape("qwen2.5-32b", 64, 5120, 40, 8, 27648, 152064, False, qkv_bias=True),
    "llama-3.1-8b": ModelShape("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, False),
    "smollm2-135m": ModelShape("smollm2-135m", 30, 576, 9, 3, 1536, 49152, True),
    "tiny": ModelShape("tiny", 2, 64, 2, 1, 128, 49152, True),
}
ALIASES = {"smollm2": "smollm2-135m"}


def from_config(config: dict[str, Any], name: str) -> ModelShape:
    """A shape from a transformers `config.json` (Llama, Qwen2, Mistral and their kind)."""
    try:
        return ModelShape(name, int(config["num_hidden_layers"]), int(config["hidden_size"]),
                          int(config["num_attention_heads"]),
                          int(config.get("num_key_value_heads") or config["num_attention_heads"]),
                          int(config["intermediate_size"]), int(config["vocab_size"]),
                          bool(config.get("tie_word_embeddings", False)), int(config.get("head_dim") or 0),
                          str(config.get("model_type", "")).startswith("qwen2"))
    except KeyError as exc:
        raise ConfigError(f"model {name}: its config.json lacks {exc.args[0]!r}") from None


def resolve(model: str) -> tuple[ModelShape, str]:
    """(shape, where it came from) for a model folder with a config.json, or a known architecture's name."""
    folder = Path(model)
    if (folder / "config.json").is_file():
        return from_config(json.loads((folder / "config.json").read_text()), str(folder)), "config.json"
    key = ALIASES.get(model.lower(), model.lower())
    if key in KNOWN:
        return KNOWN[key], "known architecture"
    raise ConfigError(f"model {model!r}: no config.json there and not a known architecture "
                      f"({', '.join(sorted(KNOWN))}); pass --policy / --answerer")


def dtype_bytes(dtype: str) -> int:
    return 4 if str(dtype).replace("torch.", "") in ("float32", "float") else 2


@dataclass(frozen=True)
class LearnerMemory:
    """One learner rank's GPU memory (GiB) by part; `activations` is the one in effect."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float
    activations_checkpointed: float
    activations_plain: float
    logprobs: float
    runtime: float
    micro_batch_tokens: int
    trainable: int
    step_gradients: float = 0.0  # ZeRO-1/2: the float32 copy of this rank's gradient partition that the
    # optimizer step makes (DeepSpeed's single_grad_partition), alive after backward has freed the activations

    @property
    def resident(self) -> float:
        """What the rank holds between steps (weights, gradients, optimizer states, reference, runtime)."""
        return self.weights + self.gradients + self.optimizer + self.reference + self.runtime

    @property
    def total(self) -> float:
        """The peak: the resident part plus the larger of backward's (activations, log-probs) and the step's."""
        return self.resident + max(self.activations + self.logprobs, self.step_gradients)


def layer_activation_bytes(shape: ModelShape, act_bytes: int) -> int:
    """Bytes one layer keeps per token for its backward pass: norms' float32 inputs, q/k/v, attention output
    (flash attention: no length-squared term), the MLP's gate, up, activation and down inputs."""
    return 8 * shape.hidden + act_bytes * (4 * shape.hidden + 2 * shape.kv_dim + 4 * shape.intermediate)


def learner_memory(shape: ModelShape, learner: Any, tokens: int) -> LearnerMemory:
    """The estimate for `learner` (a `LearnerConfig`) at `tokens` padded tokens per micro-batch."""
    ranks = max(1, int(learner.workers))
    params = shape.params
    lora = learner.lora
    trainable = shape.lora_params(lora.rank, list(lora.target_modules)) if lora.enabled else params
    bf16 = learner.precision == "bf16"
    act = 2 if bf16 else 4
    stage = learner.deepspeed.zero_stage if learner.engine == "deepspeed" else -1  # -1: torch, unpartitioned
    step_bytes = 0.0
    if learner.engine == "deepspeed":
        weight_bytes = params * act / (ranks if stage == 3 else 1)
        grad_bytes = trainable * act / (ranks if stage >= 2 else 1)
        states = trainable * (12 if bf16 else 8)  # float32 master copy (bf16 only) + AdamW's two moments
        opt_bytes = 0.0 if learner.deepspeed.offload_optimizer else states / (ranks if stage >= 1 else 1)
        if stage in (1, 2) and not learner.deepspeed.offload_optimizer:
            step_bytes = trainable * 4 / ranks  # flat_grad_partition.to(float32) before the optimizer step
    else:  # torch: float32 trainable parameters, gradients and moments; frozen weights as loaded
        weight_bytes = (params - trainable) * act + trainable * 4
        grad_bytes = trainable * 4
        opt_bytes = trainable * 8.0
    reference = 0.0
    if learner.loss.kl_coef > 0:
        reference = trainable * act if lora.enabled else params * act
    per_layer = layer_activation_bytes(shape, act)
    plain = tokens * per_layer * shape.layers
    checkpointed = tokens * (shape.layers * shape.hidden * act + 2 * per_layer)
    if learner.logprob_chunk > 0:
        logprobs = learner.logprob_chunk * shape.vocab * 4 * LOGPROB_COPIES + tokens * shape.hidden * act
    else:
        logprobs = tokens * shape.vocab * (act + 4 * LOGPROB_COPIES)
    return LearnerMemory(
        weights=weight_bytes / GIB, gradients=grad_bytes / GIB, optimizer=opt_bytes / GIB, reference=reference / GIB,
        activations=(checkpointed if learner.gradient_checkpointing else plain) / GIB,
        activations_checkpointed=checkpointed / GIB, activations_plain=plain / GIB, logprobs=logprobs / GIB,
        runtime=RUNTIME_GIB, micro_batch_tokens=tokens, trainable=trainable, step_gradients=step_bytes / GIB)


def micro_batch_tokens(learner: Any, max_len: int) -> int:
    """Padded tokens of a rank's largest micro-batch: the token budget (at least one longest sequence), or its
    share of the batch (`batch_size` x `group_size` over the ranks) in `grad_accum` parts of `max_len`."""
    if learner.max_tokens_per_micro_batch > 0:
        return max(int(learner.max_tokens_per_micro_batch), max_len)
    per_rank = math.ceil(learner.batch_size * learner.group_size / max(1, learner.workers))
    return math.ceil(per_rank / max(1, learner.grad_accum)) * max_len


@dataclass(frozen=True)
class EngineMemory:
    """One vLLM engine on one of its GPUs (GiB): its share of the GPU and what fills it."""

    budget: float
    weights: float
    lora: float
    activations: float
    runtime: float
    kv_per_token_mib: float
    max_model_len: int
    tensor_parallel: int

    @property
    def kv_space(self) -> float:
        return self.budget - self.weights - self.lora - self.activations - self.runtime

    @property
    def kv_tokens(self) -> int:
        return max(0, int(self.kv_space * 1024 / self.kv_per_token_mib)) if self.kv_per_token_mib else 0

    @property
    def full_sequences(self) -> float:
        """How many sequences of `max_model_len` tokens the KV cache holds at once (vLLM needs >= 1)."""
        return self.kv_tokens / self.max_model_len


def engine_memory(shape: ModelShape, options: dict[str, Any], gpu_mib: int) -> EngineMemory:
    """The estimate for a `VLLMBackend` with `options` on GPUs of `gpu_mib`."""
    kwargs = dict(options.get("engine_kwargs") or {})
    tp = int(kwargs.get("tensor_parallel_size", 1))
    pp = int(kwargs.get("pipeline_parallel_size", 1))
    util = float(kwargs.get("gpu_memory_utilization", 0.9))
    width = dtype_bytes(options.get("dtype", "bfloat16"))
    max_len = int(options.get("max_model_len", 2048))
    batched = int(kwargs.get("max_num_batched_tokens", 8192))  # vLLM's chunked-prefill step
    shards = tp * pp
    weights = shape.params * width / shards
    lora = 0.0
    if options.get("enable_lora"):
        rank = int(options.get("max_lora_rank", 16))
        per_layer = rank * (2 * shape.hidden + shape.heads * shape.dim + 2 * shape.kv_dim + 2 * shape.hidden
                            + 2 * shape.hidden + 2 * shape.intermediate + shape.intermediate + shape.hidden)
        lora = int(options.get("max_loras", 1)) * shape.layers * per_layer * width / shards
    activations = batched * (2 * shape.intermediate + 4 * shape.hidden) * width / tp
    kv_heads = max(1, shape.kv_heads // tp)
    kv = 2 * (shape.layers / pp) * kv_heads * shape.dim * width
    return EngineMemory(budget=util * gpu_mib / 1024, weights=weights / GIB, lora=lora / GIB,
                        activations=activations / GIB, runtime=VLLM_RUNTIME_GIB, kv_per_token_mib=kv / (1 << 20),
                        max_model_len=max_len, tensor_parallel=shards)

