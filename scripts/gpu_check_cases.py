"""The checks `scripts/gpu_check.py` runs, in order. Each takes the run's `Context` and returns an `Outcome`: PASS,
FAIL or SKIP, one line of figures against their thresholds, and the figures for results.json.

Imported only once a GPU is visible (or for `--cpu`, the script's self-test on tiny shapes), on a machine with
torch, transformers, peft, numpy, pyarrow and PyYAML and nothing more: no ray, vLLM, verl, DeepSpeed, xgrammar or
OmegaConf. The grammar replay (xgrammar, on the CPU, tested by the CPU suite) is replaced by random masks, so
what is checked is the GPU side: packed masks on the GPU, unpacked per chunk. The memory checks are in
`gpu_check_memory`, the shared pieces in `gpu_check_common`.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import time
from typing import Any

import gpu_check_memory as memory
import numpy
import pyarrow
import torch  # noqa: TID253
from gpu_check_common import GIB, Context, Line, Outcome, RandomGrammar, make_model, make_samples, update

import librarian
from librarian.learner import Learner, LearnerConfig, LoraConfig, PolicySample, collate, constraints
from librarian.learner.losses import token_logprobs
from librarian.learner.weights import full_weights, full_weights_meta
from librarian.models.weight_transfer.nccl import nccl_version, pack_plan, packed_buffers, unpacked
from librarian.planning.model_shape import KNOWN, ModelShape

NOT_IMPORTED = ("ray", "vllm", "verl", "deepspeed", "xgrammar", "omegaconf")  # what a bare GPU machine lacks


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
    if not ctx.cuda:
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
        model = make_model(ctx, shape, shape.layers, torch.float32)
        samples = make_samples(count, length, prompt, shape.vocab, spans)
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


def bf16_step(ctx: Context) -> Outcome:
    """One optimizer step of full weights under `precision: bf16`: bfloat16 compute, float32 master weights that
    keep updates below half a bfloat16 step (lr 1e-6)."""
    base = ModelShape("tiny", 2, 64, 4, 2, 128, 1003, True) if ctx.tiny else KNOWN["qwen2.5-0.5b"]
    model = make_model(ctx, base, 2, torch.bfloat16)
    cfg = LearnerConfig(device=str(ctx.device), precision="bf16", lora=LoraConfig(enabled=False), lr=1e-6)
    learner = Learner(model, cfg, pad_id=0)
    params = learner.engine.params
    before = [p.detach().clone() for p in params]
    samples = make_samples(4, 64 if ctx.tiny else 256, 16, base.vocab)
    with torch.no_grad(), learner.engine.autocast():
        logits_dtype = learner.engine.module(input_ids=collate(samples[:1], 0).input_ids.to(ctx.device)).logits.dtype
    loss, grad_norm = update(ctx, learner, samples)
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
    if ctx.cuda:
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


def rng_restored(ctx: Context) -> Outcome:
    """Building a learner (its seeded LoRA init) leaves the caller's CPU and CUDA generators as they were."""
    shape = ModelShape("tiny", 1, 64, 4, 2, 128, 1003)
    models = [make_model(ctx, shape, 1, torch.float32) for _ in range(2)]
    torch.manual_seed(1234)  # the caller's seed, on every generator
    cpu = torch.get_rng_state()
    gpu = torch.cuda.get_rng_state(ctx.device) if ctx.cuda else None
    queued = _queued_cuda_seed()
    learners = [Learner(model, LearnerConfig(device=str(ctx.device), seed=5)) for model in models]
    line = Line()
    line.holds("CPU generator restored", "cpu_restored", torch.equal(torch.get_rng_state(), cpu))
    if gpu is not None:
        line.holds("CUDA generator restored", "cuda_restored", torch.equal(torch.cuda.get_rng_state(ctx.device), gpu))
    else:
        line.holds("no CUDA seed queued", "cuda_untouched", _queued_cuda_seed() is queued)
    a, b = (dict(x.engine.trainable_state()) for x in learners)
    line.holds("seeded init repeats", "init_repeats", all(torch.equal(a[k], b[k]) for k in a))
    return line.outcome()


def _queued_cuda_seed() -> Any:
    """Before CUDA starts, the seed `torch.manual_seed` queued for it (torch's lazy-seed record), else None."""
    tracker = getattr(torch.cuda, "_lazy_seed_tracker", None)
    return tracker.get_calls()[-1] if tracker is not None and tracker.get_calls() else None


def imports(ctx: Context) -> Outcome:
    """Nothing the bare GPU machine lacks was imported by the checks."""
    line = Line()
    found = [m for m in NOT_IMPORTED if sys.modules.get(m) is not None]  # None: an import that was blocked
    line.holds(f"none of {', '.join(NOT_IMPORTED)} imported", "clean", not found)
    if found:
        line.note(f"imported: {', '.join(found)}", imported=found)
    return line.outcome()


CHECKS = [
    ("versions", versions),
    ("logprob_chunked_fp32", lambda ctx: logprob_chunked(ctx, "fp32")),
    ("logprob_chunked_bf16", lambda ctx: logprob_chunked(ctx, "bf16")),
    *memory.CHECKS,
    ("bf16_optimizer_step", bf16_step),
    ("nccl_packed_weights", nccl_packed),
    ("memory_runtime", memory.memory_runtime),  # after NCCL, so its buffers count
    ("rng_restored", rng_restored),
    ("imports", imports),
]
