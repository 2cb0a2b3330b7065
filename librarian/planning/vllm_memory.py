"""One vLLM engine's memory on one of its GPUs (GiB): weights, LoRA slots, activations of a chunked-prefill step,
its runtime, and what its `gpu_memory_utilization` share leaves for the KV cache. Pure arithmetic over a
`ModelShape`, like the learner's estimate (`memory_estimate`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from librarian.planning.model_shape import GIB, ModelShape, dtype_bytes

VLLM_RUNTIME_GIB = 1.5  # CUDA context and graphs of a vLLM engine, outside its activations and KV cache
LORA_MODULES = 4  # vLLM keeps LoRA slots for qkv, o, gate_up and down


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

