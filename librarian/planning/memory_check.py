"""Does a learner rank fit its GPU, alone or sharing it with a colocated vLLM engine? And what would make it fit?

One verdict for `librarian plan` (which knows the cluster's GPUs) and for `RLConfig.check` (which refuses a GPU
job before Ray starts, against `learner.gpu_memory_gib`, this machine's GPU, or the largest GPU the estimate
knows). The figures are `memory_estimate`'s. A colocated GPU is budgeted in its two phases: while the engine
samples it holds its `gpu_memory_utilization` share next to the learner's resident part (weights, gradients,
optimizer states, reference, runtime); while the learner updates, the learner's peak sits next to a sleeping
engine's CUDA context. A problem lists only the changes that make the estimate fit (each tried on a copy of the
config), and says so when none does.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from librarian.config import ConfigError
from librarian.planning.cluster_file import GPU_MIB
from librarian.planning.memory_estimate import (
    LearnerMemory,
    learner_memory,
    micro_batch_tokens,
    planned_batch,
)
from librarian.planning.model_lookup import resolve
from librarian.planning.model_shape import ModelShape
from librarian.planning.vllm_memory import VLLM_RUNTIME_GIB, EngineMemory, engine_memory

ASLEEP_GIB = VLLM_RUNTIME_GIB  # a sleeping engine keeps its CUDA context; weights offloaded or dropped, no KV cache
MAX_RANKS = 64  # the most learner ranks a fix proposes


@dataclass(frozen=True)
class Fit:
    """A learner rank's estimate on a GPU of `gpu_gib`, with the colocated engine's when there is one."""

    learner: LearnerMemory
    gpu_gib: float
    engine: EngineMemory | None = None

    @property
    def sampling(self) -> float:
        """GiB in use while the engine samples (the learner holds its resident part)."""
        return self.learner.resident + (self.engine.budget if self.engine else 0.0)

    @property
    def updating(self) -> float:
        """GiB in use while the learner steps (the engine, if any, asleep)."""
        return self.learner.total + (ASLEEP_GIB if self.engine else 0.0)

    @property
    def peak(self) -> float:
        return max(self.sampling, self.updating) if self.engine else self.learner.total

    @property
    def ok(self) -> bool:
        engine_ok = self.engine is None or self.engine.full_sequences >= 1
        return self.peak <= self.gpu_gib and engine_ok


def fit(shape: ModelShape, learner: Any, max_len: int, gpu_gib: float, engine: dict | None = None) -> Fit:
    """The estimate of one learner rank of `learner` (and of a colocated engine with backend options `engine`)."""
    est = learner_memory(shape, learner, planned_batch(learner, max_len))
    eng = engine_memory(shape, engine, int(gpu_gib * 1024)) if engine is not None else None
    return Fit(est, gpu_gib, eng)


def _changed(cfg: Any, **changes: Any) -> Any:
    """A copy of a config dataclass with dotted fields (`deepspeed__zero_stage`) set."""
    out = copy.deepcopy(cfg)
    for key, value in changes.items():
        *path, name = key.split("__")
        target = out
        for part in path:
            target = getattr(target, part)
        setattr(target, name, value)
    return out


def _util(engine: dict, value: float) -> dict:
    out = copy.deepcopy(engine)
    out.setdefault("engine_kwargs", {})["gpu_memory_utilization"] = value
    return out


def fixes(shape: ModelShape, learner: Any, max_len: int, gpu_gib: float, engine: dict | None = None,
          section: str = "rollout") -> tuple[list[str], str]:
    """(changes that each make it fit, what all of them together leave when none does alone; '' if one does)."""
    def fits(cfg: Any, opts: dict | None = engine) -> bool:
        return fit(shape, cfg, max_len, gpu_gib, opts).ok

    changes: list[tuple[str, dict[str, Any]]] = []
    if not learner.gradient_checkpointing:
        changes.append(("learner.gradient_checkpointing=true", {"gradient_checkpointing": True}))
    if learner.logprob_chunk == 0:
        changes.append(("learner.logprob_chunk=1024", {"logprob_chunk": 1024}))
    if learner.engine == "deepspeed":
        if learner.workers > 1 and learner.deepspeed.zero_stage < 3:
            changes.append(("learner.deepspeed.zero_stage=3", {"deepspeed__zero_stage": 3}))
        if not learner.deepspeed.offload_optimizer:
            changes.append(("learner.deepspeed.offload_optimizer=true", {"deepspeed__offload_optimizer": True}))
    if not learner.lora.enabled:
        changes.append(("learner.lora.enabled=true", {"lora__enabled": True}))
    found = [label for label, change in changes if fits(_changed(learner, **change))]
    tokens = micro_batch_tokens(learner, max_len)
    lo, hi = max_len, tokens - 1  # the largest token budget that fits (a micro-batch holds one longest sequence)
    if hi >= lo and fits(_changed(learner, max_tokens_per_micro_batch=lo)):
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(_changed(learner, max_tokens_per_micro_batch=mid)) else (lo, mid - 1)
        found.append(f"learner.max_tokens_per_micro_batch={lo} or less")
    if learner.engine == "deepspeed":
        ranks = next((n for n in range(learner.workers + 1, MAX_RANKS + 1)
                      if fits(_changed(learner, workers=n, deepspeed__zero_stage=3))), 0)
        if ranks:
            found.append(f"learner.workers={ranks} with learner.deepspeed.zero_stage=3 (one GPU each)")
    if engine is not None:
        util = float((engine.get("engine_kwargs") or {}).get("gpu_memory_utilization", 0.9))
        lower = next((u / 100 for u in range(int(util * 100) - 1, 4, -1) if fits(learner, _util(engine, u / 100))), 0)
        if lower:
            found.append(f"{section}.options.engine_kwargs.gpu_memory_utilization={lower:.2f} or less")
    if found:
        return found, ""
    every: dict[str, Any] = {"max_tokens_per_micro_batch": max_len}  # every change at once, one sequence a batch
    for _, change in changes:
        every.update(change)
    labels = [label for label, _ in changes] + [f"learner.max_tokens_per_micro_batch={max_len}"]
    if learner.engine == "deepspeed":
        ranks = next((n for n in range(learner.workers, MAX_RANKS + 1)
                      if fits(_changed(learner, **{**every, "workers": n, "deepspeed__zero_stage": 3}))), 0)
        if ranks:
            extra = [] if ranks == learner.workers else [f"learner.workers={ranks} (one GPU each)"]
            return [f"all of {', '.join(dict.fromkeys(labels + ['learner.deepspeed.zero_stage=3'] + extra))} "
                    "together"], ""
    elif fits(_changed(learner, **every)):
        return [f"all of {', '.join(labels)} together"], ""
    best = fit(shape, _changed(learner, **every), max_len, gpu_gib, engine)
    return [], f"even with all of {', '.join(labels)} it needs about {best.peak:.1f} GiB"


PHASE_NAMES = {"forward": "forward", "logprobs": "log-prob backward", "backward": "layers' backward",
               "reference": "reference forward", "step": "optimizer step"}


def phases_text(phases: dict[str, float], tokens: int) -> str:
    """"the widest phase, layers' backward, 4.9 (forward 3.1, ...; now N tokens a micro-batch)" (GiB)."""
    widest = max(phases, key=lambda name: phases[name])
    each = ", ".join(f"{PHASE_NAMES[k]} {v:.1f}" for k, v in phases.items())
    return f"the widest phase, {PHASE_NAMES[widest]}, {phases[widest]:.1f} ({each}; now {tokens} tokens a micro-batch)"


def describe(f: Fit) -> str:
    """The figures of a verdict, in GiB."""
    m = f.learner
    parts = (f"weights {m.weights:.1f}, gradients {m.gradients:.1f}, optimizer {m.optimizer:.1f}, reference "
             f"{m.reference:.1f}, runtime {m.runtime:.1f}; while learning {phases_text(m.phases, m.micro_batch_tokens)}")
    if f.engine is None:
        return f"about {m.total:.1f} GiB of {f.gpu_gib:.1f} ({parts})"
    return (f"about {f.peak:.1f} GiB of {f.gpu_gib:.1f}: while the engine samples, the learner's {m.resident:.1f} + "
            f"the engine's share {f.engine.budget:.1f} = {f.sampling:.1f}; while the learner updates, its "
            f"{m.total:.1f} + the sleeping engine's {ASLEEP_GIB:.1f} = {f.updating:.1f} ({parts})")


def problem(f: Fit, shape: ModelShape, learner: Any, max_len: int, engine: dict | None = None,
            section: str = "rollout") -> str:
    """'' when `f` fits, else its figures and the changes that would make it fit (or that none does)."""
    if f.ok:
        return ""
    text = describe(f)
    if f.engine is not None and f.engine.full_sequences < 1:
        text += (f"; the engine's share leaves {f.engine.kv_space:.1f} GiB of KV cache, less than one "
                 f"max_model_len sequence ({f.engine.max_model_len} tokens)")
    if f.learner.weights + f.learner.runtime > f.gpu_gib:
        text += f"; the weights alone ({f.learner.weights:.1f} GiB) do not fit"
    found, none = fixes(shape, learner, max_len, f.gpu_gib, engine, section)
    if len(found) == 1:
        return f"{text}; it fits with {found[0]}"
    if found:
        return f"{text}; any one of these makes it fit: {'; '.join(found)}"
    return f"{text}; no setting here makes it fit ({none}): use GPUs with more memory or a smaller model"


# --- the check before a job starts ---------------------------------------------------------------------------
def local_gpu_mib() -> int:
    """The smallest GPU's memory on this machine (nvidia-smi, no CUDA context here); 0 when it shows none."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        sizes = [int(float(line)) for line in out.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0
    return min(sizes, default=0)


def learner_gpu(learner: Any, ray_address: str) -> tuple[float, str]:
    """(GiB of one learner GPU, where the figure comes from): `learner.gpu_memory_gib`; else this machine's GPU
    when the run starts its own Ray here; else the largest GPU the estimate knows (only the impossible is
    refused)."""
    if learner.gpu_memory_gib > 0:
        return float(learner.gpu_memory_gib), "learner.gpu_memory_gib"
    here = ray_address == "local" or (not ray_address and not os.environ.get("RAY_ADDRESS"))
    mib = local_gpu_mib() if here else 0
    if mib:
        return mib / 1024, "this machine's GPU (nvidia-smi)"
    name, largest = max(GPU_MIB.items(), key=lambda kv: kv[1])
    return largest / 1024, f"the largest GPU the estimate knows ({name}; set learner.gpu_memory_gib for yours)"


def check_learner(learner: Any, model: str, max_len: int, ray_address: str, engine: dict | None = None) -> None:
    """Refuse, with a `ConfigError` naming the keys and the figures, a GPU learner that cannot fit its GPU (with
    the colocated engine's share when `engine` is given). A model whose shape is unknown here is not checked."""

    if not str(learner.device).startswith("cuda"):
        return
    try:
        shape, _ = resolve(model)
    except ConfigError:
        return  # neither a folder on this machine nor a known architecture: `librarian plan --policy` checks it
    gpu_gib, source = learner_gpu(learner, ray_address)
    verdict = fit(shape, learner, max_len, gpu_gib, engine)
    text = problem(verdict, shape, learner, max_len, engine)
    if text:
        who = "a learner rank and its colocated vLLM engine" if engine is not None else "a learner rank"
        raise ConfigError(f"{who} ({shape.name}) would not fit a GPU of {gpu_gib:.1f} GiB ({source}): {text}")
