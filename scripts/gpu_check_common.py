"""What the checks of `scripts/gpu_check.py` share: the run's `Context`, a check's `Outcome`, `Line` (figures
against thresholds, one line and one verdict), random models and samples, and a stand-in for the grammar.

Imported only once a GPU is visible (or for `--cpu`), on a machine with torch, transformers, peft, numpy, pyarrow
and PyYAML and nothing more: no ray, vLLM, verl, DeepSpeed, xgrammar or OmegaConf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch  # noqa: TID253

from librarian.learner import PolicySample, collate
from librarian.planning.model_shape import GIB, ModelShape

BOUNDS = (0.75, 1.25)  # a measured memory figure over its estimate must lie within these


@dataclass
class Context:
    device: torch.device
    tiny: bool  # the CPU self-test: small shapes, the CPU allocator measured through the profiler
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


@dataclass
class Outcome:
    status: str  # PASS | FAIL | SKIP
    text: str
    figures: dict[str, Any] = field(default_factory=dict)


class Line:
    """Figures against thresholds, gathered into one line and one verdict."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.ok = True
        self.figures: dict[str, Any] = {}

    def at_most(self, label: str, key: str, value: float, limit: float, fmt: str = "{:.1e}") -> None:
        good = math.isfinite(value) and value <= limit
        self.ok &= good
        self.figures[key], self.figures[f"{key}_limit"] = value, limit
        self.parts.append(f"{label} {fmt.format(value)} {'<=' if good else '>'} {fmt.format(limit)}")

    def at_least(self, label: str, key: str, value: float, limit: float, fmt: str = "{:.2f}") -> None:
        good = math.isfinite(value) and value >= limit
        self.ok &= good
        self.figures[key], self.figures[f"{key}_limit"] = value, limit
        self.parts.append(f"{label} {fmt.format(value)} {'>=' if good else '<'} {fmt.format(limit)}")

    def within(self, label: str, key: str, value: float, bounds: tuple[float, float] = BOUNDS) -> None:
        """`value` (a ratio) inside `bounds`, printed as `label 0.93 in [0.75, 1.25]`."""
        low, high = bounds
        good = math.isfinite(value) and low <= value <= high
        self.ok &= good
        self.figures[key], self.figures[f"{key}_bounds"] = value, [low, high]
        self.parts.append(f"{label} {value:.2f} {'in' if good else 'NOT in'} [{low:.2f}, {high:.2f}]")

    def holds(self, label: str, key: str, value: bool) -> None:
        self.ok &= bool(value)
        self.figures[key] = bool(value)
        self.parts.append(f"{label} {'yes' if value else 'NO'}")

    def note(self, text: str, **figures: Any) -> None:
        self.parts.append(text)
        self.figures.update(figures)

    def outcome(self, skip: str = "") -> Outcome:
        if skip:
            return Outcome("SKIP", "; ".join([*self.parts, skip]), self.figures)
        return Outcome("PASS" if self.ok else "FAIL", "; ".join(self.parts), self.figures)


def gib(nbytes: float) -> float:
    return nbytes / GIB


def size(gib_: float) -> str:
    """A GiB figure as text: '5.02 GiB', or '12.3 MiB' below one GiB (the CPU self-test's shapes are tiny)."""
    return f"{gib_:.2f} GiB" if abs(gib_) >= 1 else f"{gib_ * 1024:.1f} MiB"


def make_model(ctx: Context, shape: ModelShape, layers: int, dtype: torch.dtype) -> Any:
    """A randomly initialised Qwen2-style causal LM of `shape` cut to `layers`, created in `dtype` on the device
    (no float32 copy first, so the allocator sees only the model itself)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, tie_word_embeddings=shape.tied,
                         max_position_embeddings=32768)
    before = torch.get_default_dtype()
    torch.manual_seed(0)
    torch.set_default_dtype(dtype)
    try:
        with ctx.device:
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(before)
    return model


def make_samples(count: int, length: int, prompt: int, vocab: int, spans: tuple = (),
                 shorter: int = 0) -> list[PolicySample]:
    """`count` random sequences of `length` tokens (the last one `shorter` tokens shorter); loss on all but the
    first `prompt`; advantages +-1; rollout log-probs of a uniform policy; grammar `spans` (start, end) shifted
    a little per sample."""
    g = torch.Generator().manual_seed(7)
    out = []
    for i in range(count):
        n = length - (shorter if i == count - 1 else 0)
        ids = tuple(torch.randint(1, vocab, (n,), generator=g).tolist())
        mask = (0,) * prompt + (1,) * (n - prompt)
        old = tuple(-math.log(vocab) * m for m in mask)
        adv = tuple((1.0 if i % 2 else -1.0) * m for m in mask)
        cons = tuple((s + i, e + i, "g") for s, e in spans)
        out.append(PolicySample(ids, mask, old, adv, constraints=cons))
    return out


def update(ctx: Context, learner: Any, samples: list[PolicySample]) -> tuple[float, float]:
    """One update as `Learner.step` makes it (its micro-batches, token_stats, backward, the engine's step), with a
    plain policy-gradient surrogate for verl's loss: verl imports ray, which this machine lacks, and its loss
    math (on (batch, length) tensors, small beside the logits) is tested on the CPU. Returns the last
    micro-batch's loss and the gradient norm."""
    loss_value = 0.0
    for part, weight in learner.micro_batches(samples):
        batch = collate(part, learner.pad_id).to(ctx.device)
        t, first = learner._targets(batch)
        logp, _ = learner.token_stats(batch, t, first, part)
        loss = -(logp * t["adv"] * t["mask"]).sum() / t["mask"].sum().clamp_min(1)
        learner.engine.backward(loss * weight)
        loss_value = float(loss.detach())
        del batch, t, logp, loss
    return loss_value, learner.engine.step()


class RandomGrammar:
    """Stands in for xgrammar's replay: random allowed sets (about half the vocabulary) that always hold the
    sampled token; every 5th step allows that token alone (forced, log-prob 0)."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def replay_bitmask(self, grammar: str, token_ids: Any) -> torch.Tensor:
        g = torch.Generator().manual_seed(len(token_ids) * 1009 + int(token_ids[0]))
        words = (self.vocab + 31) // 32
        bits = torch.randint(-(1 << 31), 1 << 31, (len(token_ids), words), generator=g, dtype=torch.int64)
        bits = bits.to(torch.int32)
        for i, tok in enumerate(token_ids):
            if i % 5 == 0:
                bits[i] = 0
            one = torch.tensor(1 << (int(tok) % 32), dtype=torch.int64).to(torch.int32)  # bit 31: negative int32
            bits[i, int(tok) // 32] |= one
        return bits
