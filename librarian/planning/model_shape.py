"""A decoder-only transformer's sizes, from a transformers `config.json` or a known architecture's name.

Pure Python with no import beyond the standard library: the memory estimate that reads these shapes runs on a
bare GPU machine (`scripts/gpu_check.py`) where the config machinery is absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = float(1 << 30)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ShapeError(ValueError):
    """A model's config.json lacks a size the estimate needs."""


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes (Llama and Qwen2 layout: RMSNorm, GQA attention, SwiGLU MLP)."""

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
    def q_dim(self) -> int:
        """Width of the attention's queries and of its output (heads x head dim)."""
        return self.heads * self.dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.dim

    def projection(self, name: str) -> tuple[int, int]:
        """(inputs, outputs) of one of a layer's linear projections (`PROJECTIONS`)."""
        sizes = {"q_proj": (self.hidden, self.q_dim), "k_proj": (self.hidden, self.kv_dim),
                 "v_proj": (self.hidden, self.kv_dim), "o_proj": (self.q_dim, self.hidden),
                 "gate_proj": (self.hidden, self.intermediate), "up_proj": (self.hidden, self.intermediate),
                 "down_proj": (self.intermediate, self.hidden)}
        return sizes[name]

    def linear_params(self) -> int:
        """Parameters of one layer's linear projections (weights and the q/k/v biases)."""
        bias = (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        return sum(i * o for i, o in map(self.projection, PROJECTIONS)) + bias

    def layer_params(self) -> int:
        """Parameters of one layer: its projections and its two norms."""
        return self.linear_params() + 2 * self.hidden

    @property
    def head_params(self) -> int:
        """The output layer's weight (vocab x hidden); shared with the embedding when `tied`."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        embed = self.vocab * self.hidden * (1 if self.tied else 2)
        return embed + self.layers * self.layer_params() + self.hidden

    def lora_params(self, rank: int, targets: list[str]) -> int:
        """Trainable LoRA parameters: rank x (in + out) of each targeted projection in every layer."""
        return self.layers * sum(rank * sum(self.projection(t)) for t in targets if t in PROJECTIONS)

    def cut(self, layers: int) -> ModelShape:
        """The same shape with `layers` layers (a deep model measured at a few layers)."""
        return ModelShape(f"{self.name}, {layers} layers", layers, self.hidden, self.heads, self.kv_heads,
                          self.intermediate, self.vocab, self.tied, self.head_dim, self.qkv_bias)


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


def known(name: str) -> ModelShape | None:
    """The known architecture `name` (case-insensitive, aliases allowed), or None."""
    key = ALIASES.get(name.lower(), name.lower())
    return KNOWN.get(key)


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
        raise ShapeError(f"model {name}: its config.json lacks {exc.args[0]!r}") from None


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name (`float32`, `torch.bfloat16`, ...): 4 for float32, else 2."""
    return 4 if str(dtype).replace("torch.", "") in ("float32", "float") else 2
