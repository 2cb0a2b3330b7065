"""The checks `scripts/gpu_check.py` runs, in order. Each takes the run's `Context` and returns an `Outcome`: PASS,
FAIL or SKIP, one line of figures against their thresholds, and the figures for results.json.

Imported only once a GPU is visible (or for `--cpu`, the script's self-test on tiny shapes), on a machine with
torch, transformers, peft, numpy, pyarrow and the wheels of scripts/gpu_check_wheels.txt: nothing here needs
ray, vLLM, verl, DeepSpeed or xgrammar. The grammar replay (xgrammar, on the CPU, tested by the CPU suite) is
replaced by random masks, so what is checked is the GPU side: packed masks on the GPU, unpacked per chunk.
"""

from __future__ import annotations

import copy
import gc
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy
import pyarrow
import torch  # noqa: TID253

import librarian
from librarian.learner import Learner, LearnerConfig, LoraConfig, PolicySample, collate, constraints
from librarian.learner.losses import token_logprobs
from librarian.learner.weights import full_weights, full_weights_meta
from librarian.models.weight_transfer.nccl import nccl_version, pack_plan, packed_buffers, unpacked
from librarian.planning.memory_estimate import (
    KNOWN,
    ModelShape,
    from_config,
    learner_memory,
    micro_batch_tokens,
)

GIB = float(1 << 30)
NOT_IMPORTED = ("ray", "vllm", "verl", "deepspeed", "xgrammar")  # what a bare GPU machine does not have


@dataclass
class Context:
    device: torch.device
    tiny: bool  # the CPU self-test: small shapes, no CUDA-only measurement
    state: dict[str, Any] = field(default_factory=dict)


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


# --- helpers ------------------------------------------------------------------------------------------------
def _cuda(ctx: Context) -> bool:
    return ctx.device.type == "cuda"


def _driver() -> str:
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "unknown (no nvidia-smi)"


def _model(ctx: Context, shape: ModelShape, layers: int, dtype: torch.dtype) -> Any:
    """A randomly initialised Qwen2-style causal LM of `shape` cut to `layers`, created in `dtype` on the device
    (no float32 copy first, so the allocator's peak sees only the model itself)."""
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


def _samples(count: int, length: int, prompt: int, vocab: int, spans: tuple = ()) -> list[PolicySample]:
    """`count` random sequences of `length` tokens; loss on all but the first `prompt`; advantages +-1; rollout
    log-probs of a uniform policy; grammar `spans` (start, end) shifted a little per sample."""
    g = torch.Generator().manual_seed(7)
    out = []
    for i in range(count):
        ids = tuple(torch.randint(0, vocab, (length,), generator=g).tolist())
        mask = (0,) * prompt + (1,) * (length - prompt)
        old = tuple(-math.log(vocab) * m for m in mask)
        adv = tuple((1.0 if i % 2 else -1.0) * m for m in mask)
        cons = tuple((s + i, e + i, "g") for s, e in spans)
        out.append(PolicySample(ids, mask, old, adv, constraints=cons))
    return out


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


def _step(ctx: Context, learner: Learner, samples: list) -> tuple[float, float]:
    """One update as `Learner.step` makes it (token_stats, backward, the engine's step) over one micro-batch, with a
    plain policy-gradient surrogate for verl's loss: verl imports ray, which this machine lacks, and its loss math
    (on (batch, length) tensors, small beside the logits) is tested on the CPU."""
    batch = collate(samples, learner.pad_id).to(ctx.device)
    t, first = learner._targets(batch)
    logp, _ = learner.token_stats(batch, t, first, samples)
    loss = -(logp * t["adv"] * t["mask"]).sum() / t["mask"].sum().clamp_min(1)
    learner.engine.backward(loss)
    return float(loss.detach()), learner.engine.step()


# --- the checks ---------------------------------------------------------------------------------------------
def versions(ctx: Context) -> Outcome:
    import peft
    import transformers

    line = Line()
    nccl = nccl_version()
    figures = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
               "cudnn": torch.backends.cudnn.version(), "nccl": nccl, "transformers": transformers.__version__,
               "peft": peft.__version__, "numpy": numpy.__version__, "pyarrow": pyarrow.__version__,
               "librarian": librarian.__version__}
    if not _cuda(ctx):
        line.note(f"torch {torch.__version__} (CPU self-test), transformers {transformers.__version__}, "
                  f"peft {peft.__version__}", **figures)
        return line.outcome()
    props = torch.cuda.get_device_properties(ctx.device)
    figures.update(driver=_driver(), gpu=props.name, capability=f"{props.major}.{props.minor}",
                   gpu_gib=round(props.total_memory / GIB, 1), gpus=torch.cuda.device_count())
    line.note(f"torch {torch.__version__} CUDA {torch.version.cuda} NCCL {nccl or 'none'} driver {figures['driver']}; "
              f"{props.name} sm{props.major}{props.minor} {figures['gpu_gib']:.0f} GiB x{figures['gpus']}", **figures)
    line.holds("NCCL in torch", "has_nccl", bool(nccl))
    line.holds("bf16", "bf16", torch.cuda.is_bf16_supported())
    return line.outcome()


def _constrained_pass(ctx: Context, model: Any, precision: str, chunk: int, samples: list) -> tuple:
    """The learner's log-probs of the trained tokens (grammar masks applied) and the gradients of their sum."""
    cfg = LearnerConfig(device=str(ctx.device), precision=precision, lora=LoraConfig(enabled=False),
                        logprob_chunk=chunk)
    learner = Learner(copy.deepcopy(model), cfg, pad_id=0, tokenizer="random-grammar")
    batch = collate(samples, 0).to(ctx.device)
    t, first = learner._targets(batch)
    if chunk:
        logp, _ = learner.token_stats(batch, t, first, samples)
    else:  # token_stats' whole-batch branch without its entropy (verl's function; verl imports ray)
        logits = learner._logits(batch.input_ids, batch.attention_mask, first)
        banned = constraints.disallowed_mask(samples, first, tuple(logits.shape), learner.tokenizer, logits.device)
        logp = token_logprobs(constraints.mask_logits(logits, banned), t["ids"])
    picked = logp[t["mask"] > 0]
    picked.sum().backward()
    grads = [p.grad.detach().float().clone() for p in learner.engine.params]
    return picked.detach().float(), grads, learner.chunked


def logprob_chunked(ctx: Context, precision: str) -> Outcome:
    """Chunked (packed grammar masks unpacked per chunk on the device) against whole-batch log-probs (dense
    masks) and the gradients of their sum, through `Learner.token_stats`."""
    if ctx.tiny:
        shape, count, length, prompt, spans, chunk = ModelShape("tiny", 2, 64, 4, 2, 128, 1003), 4, 48, 8, \
            ((12, 24), (30, 44)), 16
    else:  # a Qwen-sized vocabulary that is not a multiple of 32 (the bitmask's last word is partly padding)
        shape, count, length, prompt, spans, chunk = ModelShape("small", 2, 512, 8, 2, 1408, 151931), 8, 640, \
            128, ((200, 330), (400, 560)), 256
    limits = {"fp32": (1e-4, 1e-4), "bf16": (2e-2, 5e-2)}[precision]
    saved = constraints.compiler_for
    constraints.compiler_for = lambda tokenizer, vocab: RandomGrammar(vocab)
    try:
        model = _model(ctx, shape, shape.layers, torch.float32)
        samples = _samples(count, length, prompt, shape.vocab, spans)
        whole, whole_grads, _ = _constrained_pass(ctx, model, precision, 0, samples)
        parts, part_grads, chunked = _constrained_pass(ctx, model, precision, chunk, samples)
        plain = [PolicySample(s.token_ids, s.loss_mask, s.old_logprobs, s.advantages) for s in samples]
        free, _, _ = _constrained_pass(ctx, model, precision, chunk, plain)
    finally:
        constraints.compiler_for = saved
    scale = max(float(g.abs().max()) for g in whole_grads)
    dgrad = max(float((a - b).abs().max()) for a, b in zip(part_grads, whole_grads, strict=True)) / max(scale, 1e-30)
    line = Line()
    line.holds("chunked path", "chunked", chunked)
    line.at_most("max|dlogp|", "max_abs_logprob_diff", float((parts - whole).abs().max()), limits[0])
    line.at_most("max|dgrad|/max|grad|", "max_rel_grad_diff", dgrad, limits[1])
    line.at_least("masks move log-probs by", "mask_effect", float((free - whole).abs().max()), 0.1)
    line.note(f"{whole.numel()} tokens, vocab {shape.vocab}, chunk {chunk}", tokens=whole.numel())
    return line.outcome()


def memory_7b(ctx: Context) -> Outcome:
    """A Qwen2-7B-shaped model cut to 2 layers, LoRA, gradient checkpointing, bf16, one 16k-token micro-batch:
    the allocator's peak against `librarian plan`'s estimate for the same shape (without its fixed runtime)."""
    if ctx.tiny:
        base, count, length = ModelShape("tiny", 2, 64, 4, 2, 128, 1003), 2, 64
    else:
        base, count, length = KNOWN["qwen2.5-7b"], 4, 4096
    if _cuda(ctx):
        gc.collect()  # the earlier checks' models, so that none is freed during the measurement
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(ctx.device)
        start_bytes = torch.cuda.memory_allocated(ctx.device)
    model = _model(ctx, base, 2, torch.bfloat16)
    shape = from_config(model.config.to_dict(), f"{base.name}, 2 layers")
    cfg = LearnerConfig(device=str(ctx.device), precision="bf16", gradient_checkpointing=True, lr=1e-5,
                        max_tokens_per_micro_batch=count * length, lora=LoraConfig(rank=32, alpha=64))
    est = learner_memory(shape, cfg, micro_batch_tokens(cfg, length))
    expected = est.total - est.runtime  # the CUDA context and NCCL buffers are outside torch's allocator
    learner = Learner(model, cfg, pad_id=0)
    began = time.perf_counter()
    loss, _ = _step(ctx, learner, _samples(count, length, length // 2, shape.vocab))
    seconds = time.perf_counter() - began
    line = Line()
    line.holds("LoRA masters float32", "masters_fp32", all(p.dtype == torch.float32 for p in learner.engine.params))
    line.note(f"{count * length} tokens, step {seconds:.1f} s", tokens=count * length, step_s=round(seconds, 2),
              loss=loss, estimate_gib=round(expected, 3),
              estimate_parts={k: round(v, 3) for k, v in vars(est).items() if isinstance(v, float)})
    if not _cuda(ctx):
        return line.outcome(skip=f"estimate {expected:.3f} GiB; peak not measured (no CUDA allocator on CPU)")
    peak = (torch.cuda.max_memory_allocated(ctx.device) - start_bytes) / GIB
    ratio = peak / expected
    line.note(f"peak {peak:.2f} GiB vs plan's {expected:.2f} GiB", peak_gib=round(peak, 3))
    line.at_least("ratio", "ratio_low", ratio, 0.75)
    line.at_most("ratio", "ratio_high", ratio, 1.25, "{:.2f}")
    del learner, model
    torch.cuda.empty_cache()
    return line.outcome()


def bf16_step(ctx: Context) -> Outcome:
    """One optimizer step of full weights under `precision: bf16`: bfloat16 compute, float32 master weights that
    keep updates below half a bfloat16 step (lr 1e-6)."""
    base = ModelShape("tiny", 2, 64, 4, 2, 128, 1003, True) if ctx.tiny else KNOWN["qwen2.5-0.5b"]
    model = _model(ctx, base, 2, torch.bfloat16)
    cfg = LearnerConfig(device=str(ctx.device), precision="bf16", lora=LoraConfig(enabled=False), lr=1e-6)
    learner = Learner(model, cfg, pad_id=0)
    params = learner.engine.params
    before = [p.detach().clone() for p in params]
    samples = _samples(4, 64 if ctx.tiny else 256, 16, base.vocab)
    with torch.no_grad(), learner.engine.autocast():
        logits_dtype = learner.engine.module(input_ids=collate(samples[:1], 0).input_ids.to(ctx.device)).logits.dtype
    loss, grad_norm = _step(ctx, learner, samples)
    moved = sum(bool((p.detach() != b).any()) for p, b in zip(params, before, strict=True))
    lost = total = 0
    for p, b in zip(params, before, strict=True):
        delta = (p.detach() - b)
        changed = delta != 0
        spacing = torch.exp2(torch.floor(torch.log2(b.abs().clamp_min(1e-30))) - 7)  # bfloat16's step at b
        lost += int(((delta.abs() < spacing / 2) & changed).sum())
        total += int(changed.sum())
    line = Line()
    line.holds("masters float32", "masters_fp32", all(p.dtype == torch.float32 for p in params))
    line.holds("autocast logits bfloat16", "bf16_compute", logits_dtype == torch.bfloat16)
    line.at_least("tensors moved", "moved_fraction", moved / max(1, len(params)), 0.9)
    line.note(f"{lost / max(1, total):.0%} of the updates are below half a bfloat16 step (kept by the masters)",
              below_bf16_step=lost / max(1, total), loss=loss, grad_norm=grad_norm)
    ctx.state["full_learner"] = learner
    return line.outcome()


def nccl_packed(ctx: Context) -> Outcome:
    """torch.cuda.nccl on one rank: init, the warm-up all-reduce, then all-reduce and broadcast of the packed
    bf16 weight buffers the sender broadcasts (weight_transfer.nccl.packed_buffers); every tensor unpacks bit for bit."""
    learner = ctx.state.get("full_learner")
    if learner is None:
        return Outcome("SKIP", "needs bf16_optimizer_step's learner (it failed)")
    meta = full_weights_meta(learner, torch.bfloat16)
    buffer_bytes = 4096 if ctx.tiny else 32 << 20
    plan = pack_plan(meta, buffer_bytes)
    expected = dict(full_weights(learner, torch.bfloat16))
    comm = None
    if _cuda(ctx):
        import torch.cuda.nccl as nccl

        comm = nccl.init_rank(1, nccl.unique_id(), 0)
        warm = torch.ones(1, device=ctx.device)
        nccl.all_reduce([warm], comms=[comm])  # what vLLM's communicator starts with (NcclWeightSender.connect)
        if float(warm.item()) != 1.0:
            return Outcome("FAIL", f"the warm-up all-reduce over one rank gave {float(warm.item())}, not 1.0")
    changed = mismatched = sent = 0
    began = time.perf_counter()
    for indices, buffer in zip(plan, packed_buffers(full_weights(learner, torch.bfloat16), meta, buffer_bytes,
                                                    ctx.device), strict=True):
        copy_ = buffer.clone()
        if comm is not None:
            nccl.all_reduce([buffer], comms=[comm])  # a sum over one rank: unchanged
            nccl.broadcast([buffer], root=0, comms=[comm])
            torch.cuda.synchronize(ctx.device)
        changed += int(not torch.equal(buffer, copy_))
        mismatched += sum(not torch.equal(t, expected[name]) for name, t in unpacked(buffer, meta, indices))
        sent += buffer.numel()
    seconds = time.perf_counter() - began
    line = Line()
    line.note(f"{len(plan)} buffers, {sent / GIB:.2f} GiB in {seconds:.2f} s", buffers=len(plan), bytes=sent,
              seconds=round(seconds, 3), nccl=nccl_version())
    line.at_most("buffers changed", "buffers_changed", changed, 0, "{:d}")
    line.at_most("tensors not bit-equal", "tensors_mismatched", mismatched, 0, "{:d}")
    if comm is None:
        return line.outcome(skip="packing round trip only (NCCL needs CUDA)")
    return line.outcome()


def imports(ctx: Context) -> Outcome:
    """Nothing the bare GPU machine lacks was imported by the checks."""
    line = Line()
    found = [m for m in NOT_IMPORTED if m in sys.modules]
    line.holds(f"none of {', '.join(NOT_IMPORTED)} imported", "clean", not found)
    if found:
        line.note(f"imported: {', '.join(found)}", imported=found)
    return line.outcome()


CHECKS = [
    ("versions", versions),
    ("logprob_chunked_fp32", lambda ctx: logprob_chunked(ctx, "fp32")),
    ("logprob_chunked_bf16", lambda ctx: logprob_chunked(ctx, "bf16")),
    ("memory_7b_lora_16k", memory_7b),
    ("bf16_optimizer_step", bf16_step),
    ("nccl_packed_weights", nccl_packed),
    ("imports", imports),
]
