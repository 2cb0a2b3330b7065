"""RL step benchmark: synchronous steps vs rollouts that overlap learning (`rollout.asynchronous`).

    python benchmarks/rl_step_bench.py --out build/bench/rl_step [--steps 6] [key=value ...]

Two `train_builder` runs in one local Ray session, the same seeds and config:
the tiny random model, `--workers` rollout workers and the learner each on
CPU slots of their own (placement group), `--steps` GRPO steps each, no SFT,
no exam, probes in the driver. The first runs synchronously (rollouts, then
the update); the second with `rollout.asynchronous=true
learner.loss.rollout_is=token` (step t+1's rollouts run while the learner
updates on step t). A step's time is its wall time from asking for its
rollouts to the published update (`step_s` in each run's history); the
first step of each run is a warm-up (an asynchronous run has nothing to
overlap yet) and is left out of the means. OUT/results.json: `sync_step_s`,
`async_step_s`, `async_speedup` (sync / async, target 1.3),
`learner_idle_fraction_sync` / `_async` (the share of the steps' wall time the
learner was not updating or publishing), the per-step figures of both runs,
the staleness the asynchronous run reported, the load average and the config.
Extra `key=value` arguments override the run config (e.g. rollout.max_new_tokens=32).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from librarian.config import load_config  # noqa: E402
from librarian.pipelines.builder.config import TrainBuilderConfig  # noqa: E402
from librarian.pipelines.builder.train import run  # noqa: E402

log = logging.getLogger("rl_step_bench")
TARGET = 1.3
BASE = ["rollout.options={model: tiny}", "rollout.cpus_per_worker=1", "ray.learner_cpus=1", "rollout.torch_threads=1",
        "rollout.budget=3", "rollout.max_new_tokens=24", "rollout.constrained=false", "learner.batch_size=2",
        "learner.group_size=4", "learner.lora.rank=4", "learner.lora.alpha=8", "learner.lr=1e-3", "reward.every=1",
        "reward.max_probes=1", "probe.workers=0", "probe.budget=2", "sft.enabled=false", "exam.enabled=false",
        "data.train_corpora=4", "data.exam_corpora=1", "data.docs_per_corpus=6", "checkpoint_every=0",
        "save_trajectories=false"]
ASYNC = ["rollout.asynchronous=true", "learner.loss.rollout_is=token"]


def summary(history: list[dict[str, float]]) -> dict[str, Any]:
    """Mean step time and learner idle share over the steps after the first, and every step's figures."""
    steady = history[1:] or history
    wall = sum(h["step_s"] for h in steady)
    keys = ("step_s", "rollout_s", "rollout_wait_s", "reward_s", "update_s", "learner_idle_fraction",
            "staleness_max", "stale_dropped")
    return {"step_s": statistics.fmean(h["step_s"] for h in steady),
            "learner_idle_fraction": 1 - sum(h["update_s"] for h in steady) / wall,
            "steps": [{k: h.get(k) for k in keys} for h in history]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--workers", type=int, default=1, help="rollout workers (one CPU slot each)")
    p.add_argument("overrides", nargs="*", help="key=value for the train_builder config")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import ray

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = [*BASE, f"rollout.workers={args.workers}", f"steps={args.steps}", *args.overrides]
    ray.init(num_cpus=1 + args.workers, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"))
    load_before = os.getloadavg()
    runs: dict[str, Any] = {}
    try:
        for name, extra in (("sync", []), ("async", ASYNC)):
            log.info("%s run: %d steps", name, args.steps)
            cfg = load_config(TrainBuilderConfig, [*common, *extra, f"out_dir={out / name}"])
            runs[name] = summary(run(cfg)["history"])
    finally:
        ray.shutdown()
    sync, asyn = runs["sync"], runs["async"]
    results = {
        "sync_step_s": sync["step_s"], "async_step_s": asyn["step_s"], "async_speedup": sync["step_s"] / asyn["step_s"],
        "learner_idle_fraction_sync": sync["learner_idle_fraction"],
        "learner_idle_fraction_async": asyn["learner_idle_fraction"],
        "target_async_speedup": TARGET, "meets_target": sync["step_s"] / asyn["step_s"] >= TARGET,
        "async_staleness_max": max(s["staleness_max"] for s in asyn["steps"]),
        "sync_steps": sync["steps"], "async_steps": asyn["steps"],
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "config": common,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"step time: sync {results['sync_step_s']:.2f} s, async {results['async_step_s']:.2f} s -> speedup "
          f"{results['async_speedup']:.2f} (target {TARGET}); learner idle: sync "
          f"{results['learner_idle_fraction_sync']:.0%}, async {results['learner_idle_fraction_async']:.0%}; "
          f"load average {load_before} -> {results['load_average_after']} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
