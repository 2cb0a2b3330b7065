"""The memory checks of `scripts/gpu_check.py`: real learner updates measured by the estimate's phases
(`librarian.planning.memory_meter`) against `memory_estimate`, the figures `librarian plan` and the config check
use. On a GPU: Qwen2-7B's shape (bf16, LoRA rank 32, two micro-batches of 16,384 tokens) cut to 2 and 4 layers,
gradient checkpointing on and off, one padded micro-batch; a grammar-masked log-prob chunk of 1,024 rows at a
152k vocabulary; the runtime outside torch's allocations. With `--cpu` the same on tiny shapes, measured on the
CPU allocator through the profiler.
"""

from __future__ import annotations

import gc
from typing import Any

import torch  # noqa: TID253
from gpu_check_common import Context, Line, Outcome, gib, make_model, make_samples, size, update

from librarian.learner import Learner, LearnerConfig, LoraConfig
from librarian.learner.constraints import GrammarRows
from librarian.learner.logprobs import chunked_stats
from librarian.planning.activation_memory import Chunk
from librarian.planning.memory_estimate import RUNTIME_GIB, MicroBatch, learner_memory
from librarian.planning.memory_meter import expected, measured, measured_update
from librarian.planning.model_shape import KNOWN, ModelShape

TINY = ModelShape("tiny", 4, 128, 4, 2, 352, 4001)  # a vocabulary that is no multiple of 32, like 151,931


def _plan(ctx: Context) -> dict[str, Any]:
    """Shapes of the run: the model, rows of a micro-batch, their length, the log-prob chunk, the LoRA rank."""
    if ctx.tiny:
        return {"shape": TINY, "rows": 4, "length": 96, "chunk": 64, "rank": 8}
    return {"shape": KNOWN["qwen2.5-7b"], "rows": 4, "length": 4096, "chunk": 1024, "rank": 32}


def _fresh(ctx: Context) -> None:
    """Drop what earlier checks left, so nothing is freed during a measurement and the cache starts empty."""
    gc.collect()
    if ctx.cuda:
        torch.cuda.synchronize(ctx.device)
        torch.cuda.empty_cache()


def run_config(ctx: Context, layers: int, checkpointed: bool, padded: bool = False) -> dict[str, Any]:
    """Build, warm up and measure one update (two micro-batches); the figures in GiB next to the estimate's."""
    plan = _plan(ctx)
    shape, rows, length = plan["shape"], plan["rows"], plan["length"]
    _fresh(ctx)
    cfg = LearnerConfig(device=str(ctx.device), precision="bf16", gradient_checkpointing=checkpointed, lr=1e-5,
                        max_tokens_per_micro_batch=rows * length, logprob_chunk=plan["chunk"],
                        lora=LoraConfig(rank=plan["rank"], alpha=2 * plan["rank"]))
    learner, built = measured(ctx.device, lambda: Learner(make_model(ctx, shape, layers, torch.bfloat16), cfg))
    samples = make_samples(2 * rows, length, 1, shape.vocab, shorter=length // 8 if padded else 0)
    widest = learner.micro_batches(samples)[-1][0]  # the second micro-batch: gradients alive, padded if any is
    batch = MicroBatch(max(len(s.token_ids) for s in widest) * len(widest), length,
                       trained=sum(sum(s.loss_mask[1:]) for s in widest), padded=padded, constrained=False)
    _, warm = measured(ctx.device, lambda: update(ctx, learner, samples))  # AdamW's states appear here
    meter = measured_update(learner, lambda: update(ctx, learner, samples))  # as every later update
    est = learner_memory(shape.cut(layers), cfg, batch)
    want = expected(est)
    out = {"layers": layers, "checkpointed": checkpointed, "padded": padded, "tokens": batch.tokens,
           "peak": gib(meter.peak), "expected_peak": gib(max(want.values())),
           "footprint": gib(built.alive + warm.alive + meter.peak), "expected_footprint": est.total - est.runtime,
           "weights": gib(built.alive), "expected_weights": est.weights, "slack": gib(meter.slack),
           "masters_fp32": all(p.dtype == torch.float32 for p in learner.engine.params),
           "phases": {k: round(gib(v), 4) for k, v in meter.peaks.items()},
           "expected_phases": {k: round(gib(v), 4) for k, v in want.items()}}
    out["ratio"] = out["peak"] / out["expected_peak"]
    return out


def _line_for(line: Line, label: str, key: str, got: dict[str, Any]) -> None:
    line.within(f"{label} peak {size(got['peak'])} / est {size(got['expected_peak'])}", key, got["ratio"])


def memory_2_layers(ctx: Context) -> Outcome:
    """2 layers: the update's peak with and without checkpointing (and padded rows) against the estimate, their
    difference against the estimate's, and the weights."""
    line = Line()
    got = {name: run_config(ctx, 2, ckpt, padded) for name, ckpt, padded in
           (("checkpointed", True, False), ("plain", False, False), ("padded", False, True))}
    ctx.state["memory_2"] = got
    for name, figures in got.items():
        _line_for(line, name, f"{name}_ratio", figures)
    saved = got["plain"]["peak"] - got["checkpointed"]["peak"]
    planned = got["plain"]["expected_peak"] - got["checkpointed"]["expected_peak"]
    line.within(f"checkpointing saves {size(saved)} / est {size(planned)}", "checkpointing_ratio",
                saved / planned if planned else float("nan"))
    weights = got["plain"]
    line.holds("LoRA masters float32", "masters_fp32", all(c["masters_fp32"] for c in got.values()))
    line.within(f"weights {size(weights['weights'])} / est {size(weights['expected_weights'])}", "weights_ratio",
                weights["weights"] / weights["expected_weights"])
    line.note(f"{got['plain']['tokens']} tokens a micro-batch", configs=got)
    return line.outcome()


def memory_4_layers(ctx: Context) -> Outcome:
    """4 layers: the peaks again, and the cost of a layer (4 layers against 2) against the estimate's."""
    two = ctx.state.get("memory_2")
    if two is None:
        return Outcome("SKIP", "needs memory_2_layers' figures (it failed)")
    line = Line()
    got = {name: run_config(ctx, 4, ckpt) for name, ckpt in (("checkpointed", True), ("plain", False))}
    ctx.state["memory_4"] = got
    for name, figures in got.items():
        _line_for(line, name, f"{name}_ratio", figures)
    for name in got:
        slope = (got[name]["footprint"] - two[name]["footprint"]) / 2
        planned = (got[name]["expected_footprint"] - two[name]["expected_footprint"]) / 2
        line.within(f"{name} per layer {size(slope)} / est {size(planned)}", f"{name}_slope_ratio", slope / planned)
    line.note("per layer: the whole footprint (weights, states, the update's peak) at 4 layers minus 2, halved",
              configs=got)
    return line.outcome()


def memory_grammar_chunk(ctx: Context) -> Outcome:
    """One log-prob chunk with every row under a grammar (packed masks unpacked in it), bf16 autocast, a frozen
    output layer: its forward and backward peaks against the estimate's chunk."""
    rows, vocab, hidden = (64, TINY.vocab, TINY.hidden) if ctx.tiny else (1024, 152064, 3584)
    _fresh(ctx)
    g = torch.Generator(device=ctx.device).manual_seed(0)
    weight = (torch.randn(vocab, hidden, generator=g, device=ctx.device) * 0.02).to(torch.bfloat16)
    states = torch.randn(rows, hidden, generator=g, device=ctx.device).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), generator=g, device=ctx.device)
    words = (vocab + 31) // 32
    bits = torch.randint(-(1 << 31), 1 << 31, (rows, words), generator=g, device=ctx.device, dtype=torch.int64)
    grammar = GrammarRows(torch.arange(rows, device=ctx.device), bits.to(torch.int32), vocab,
                          torch.arange(rows))

    def forward() -> torch.Tensor:
        with torch.autocast(device_type=ctx.device.type, dtype=torch.bfloat16):
            return chunked_stats(states, weight, None, targets, 1.0, rows, grammar)

    out, fwd = measured(ctx.device, forward)
    loss = out[:, 0].sum()
    _, bwd = measured(ctx.device, loss.backward)
    chunk = Chunk(rows, vocab, constrained=True)
    want_fwd = chunk.peak("forward")
    want_bwd = chunk.peak("backward") + 2 * rows * hidden * 2  # and the hidden states' gradient, scattered, summed
    line = Line()
    line.within(f"forward peak {size(gib(fwd.peak))} / est {size(gib(want_fwd))}", "forward_ratio",
                fwd.peak / want_fwd)
    line.within(f"backward peak {size(gib(bwd.peak))} / est {size(gib(want_bwd))}", "backward_ratio",
                bwd.peak / want_bwd)
    moments = {k: round(gib(v), 4) for k, v in chunk.moments().items()}
    text = ", ".join(f"{k} {size(v)}" for k, v in moments.items())
    line.note(f"{rows} rows x {vocab} tokens; the estimate's moments: {text}", moments=moments,
              forward_gib=gib(fwd.peak), backward_gib=gib(bwd.peak))
    return line.outcome()


def memory_runtime(ctx: Context) -> Outcome:
    """What the estimate's fixed runtime term stands for, measured once: the device memory in use outside
    torch's pool (CUDA context, library workspaces, NCCL's buffers) plus the pool's slack at the updates' peaks."""
    line = Line()
    slack = max((c["slack"] for key in ("memory_2", "memory_4") for c in ctx.state.get(key, {}).values()),
                default=0.0)
    if not ctx.cuda:
        return line.outcome(skip=f"no CUDA context on the CPU (estimate {RUNTIME_GIB:.1f} GiB)")
    _fresh(ctx)
    free, total = torch.cuda.mem_get_info(ctx.device)
    outside = gib(total - free - torch.cuda.memory_reserved(ctx.device))
    runtime = outside + slack
    line.note(f"outside torch's pool {size(outside)} + pool slack {size(slack)}; ratio to the estimate "
              f"{runtime / RUNTIME_GIB:.2f}", outside_gib=outside, slack_gib=slack, ratio=runtime / RUNTIME_GIB)
    line.at_most("runtime", "runtime_gib", runtime, RUNTIME_GIB, "{:.2f}")
    return line.outcome()


CHECKS = [
    ("memory_2_layers", memory_2_layers),
    ("memory_4_layers", memory_4_layers),
    ("memory_grammar_chunk", memory_grammar_chunk),
]
