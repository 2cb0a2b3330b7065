"""RL throughput: builds a minute of a GRPO step on the learning preset, today's settings against the fast ones.

    python benchmarks/rl_throughput.py --out build/bench/rl_throughput [--steps 3] [--init-from DIR] [key=value ...]
    python benchmarks/rl_throughput.py --pipeline researcher --out build/bench/rl_throughput_researcher [--steps 3]

Two `train_builder` runs of `configs/learning_builder.yaml` (SmolLM2-135M-Instruct with LoRA, tool calls under
the grammar, probe rewards), one after the other in this process, the same seeds, no exam:

- `baseline`: the preset as it is (the `hf` backend, one torch thread, a group of 4 builds a step); it runs the
  preset's SFT warm start and saves it;
- `fast`: the same task and warm start (`sft.init_from`, so both start from the same policy) with `FAST`: rollouts
  on vLLM (`rollout.backend=vllm`: continuous batching, prefix caching of the shared system prompt and listing, the
  grammar in vLLM's structured outputs; the engine serves the policy as full weights with the LoRA adapter folded
  in, `learner.lora.publish=merged`, since vLLM's CPU LoRA kernels decode ~2.5x slower), the learner on both cores (`rollout.torch_threads=2`, which the learner
  actor takes too), one micro-batch per sequence (no padding), a group of 16 builds generated in one batch, and
  the group's shared opening (system prompt, tools, task and listing: ~790 of ~1,400 tokens a build) run through
  the learner once per update (`learner.shared_prefix`), not once per build.

A step's time is its wall time from asking for its rollouts to the published update (`step_s`); the first step of
each run is a warm-up (engine start-up costs, the first grammar compile) and is left out of the rates.
OUT/results.json: `builds_per_minute`, `tokens_per_second_rollout`, `learner_seconds_per_step`,
`probe_seconds_per_step` (the fast run) and the same as `baseline_*`, `speedup` (builds a minute, fast over
baseline; target 4), and the policy's quality at step 0 in both runs, each with a 95% CI: `valid_call_rate` (per
policy turn) and `success_rate` (builds whose reward is positive); `quality_same` when each pair of CIs overlaps.
OUT/throughput.png compares the four figures. This measures the machinery's speed, not learning.

`--pipeline researcher` does the same for `train_researcher` on `configs/researcher_learning.yaml` (`hf`, one
torch thread, a group of 4 trajectories, the KL term to the SFT policy) against `FAST_RESEARCHER`: vLLM rollouts
serving merged weights, both cores, one micro-batch per sequence, a group of 8, and the group's shared opening
run once per update for the policy and once for the KL term's reference (`learner.shared_prefix`). Its figures are `trajectories_per_minute` and the rest as above; step-0 quality is the
success rate (source recall above 0) with a CI and the valid-call rate of the run's history (no CI: the
researcher's rows do not keep each turn's validity).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from librarian.config import load_config  # noqa: E402
from librarian.evaluation.learning_curves import turn_reward_sum  # noqa: E402
from librarian.evaluation.metrics.bootstrap import bootstrap_ci  # noqa: E402
from librarian.pipelines.builder import train as builder_train  # noqa: E402
from librarian.pipelines.builder.config import TrainBuilderConfig  # noqa: E402
from librarian.pipelines.researcher import train as researcher_train  # noqa: E402
from librarian.pipelines.researcher.config import TrainResearcherConfig  # noqa: E402
from librarian.rl import check as rl_check  # noqa: E402

TARGET = 4.0
FAST = ["rollout.backend=vllm",
        "rollout.options={model: smollm2, max_model_len: 4096, env: {OMP_NUM_THREADS: '2'}}",
        "learner.lora.publish=merged", "rollout.torch_threads=2", "learner.max_tokens_per_micro_batch=1",
        "learner.group_size=16", "learner.shared_prefix=256"]
FAST_RESEARCHER = ["rollout.backend=vllm",
                   "rollout.options={model: smollm2, max_model_len: 8192, env: {OMP_NUM_THREADS: '2'}}",
                   "learner.lora.publish=merged", "rollout.torch_threads=2", "learner.max_tokens_per_micro_batch=1",
                   "learner.group_size=8", "learner.shared_prefix=256"]


@dataclass(frozen=True)
class Pipeline:
    """What the benchmark runs for one pipeline: its config class, check and run, preset, fast overrides."""

    config_cls: type
    check: Callable[[Any], Any]
    run: Callable[[Any], dict[str, Any]]
    default_config: str
    common: tuple[str, ...]
    fast: tuple[str, ...]
    unit: str  # what one sample is called in the figures: builds | trajectories
    reward: Callable[[dict[str, Any]], float]


PIPELINES = {
    "builder": Pipeline(TrainBuilderConfig, builder_train.check, builder_train.run, "configs/learning_builder.yaml",
                        ("exam.enabled=false", "checkpoint_every=0"), tuple(FAST), "builds", turn_reward_sum),
    "researcher": Pipeline(TrainResearcherConfig, rl_check, researcher_train.run, "configs/researcher_learning.yaml",
                           ("eval.enabled=false", "checkpoint_every=0"), tuple(FAST_RESEARCHER), "trajectories",
                           lambda row: float(row["reward"])),
}


def run_pipeline(pipeline: Pipeline, config: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    cfg = load_config(pipeline.config_cls, [*overrides, f"out_dir={out}"], config_file=config)
    pipeline.check(cfg)
    return pipeline.run(cfg)


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every build of a run (trajectories.jsonl rows)."""
    with (run_dir / "trajectories.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def rates(history: list[dict[str, float]], rows: list[dict[str, Any]], unit: str = "builds") -> dict[str, float]:
    """Samples (`unit`) a minute, rollout tokens a second, learner and probe seconds a step, over the steps after
    the first."""
    steady = history[1:] or history
    steps = {int(h["step"]) for h in steady}
    builds = [r for r in rows if int(r["step"]) in steps]
    tokens = sum(t.get("tokens", 0) for r in builds for t in r["turns"])
    wall = sum(h["step_s"] for h in steady)
    return {f"{unit}_per_minute": 60.0 * len(builds) / wall,
            "tokens_per_second_rollout": tokens / sum(h["rollout_s"] for h in steady),
            "learner_seconds_per_step": statistics.fmean(h["update_s"] for h in steady),
            "probe_seconds_per_step": statistics.fmean(h["reward_s"] for h in steady),
            "step_seconds": statistics.fmean(h["step_s"] for h in steady),
            f"{unit}_per_step": len(builds) / len(steady), "steps_measured": float(len(steady))}


def step0_quality(rows: list[dict[str, Any]], reward: Callable[[dict[str, Any]], float] = turn_reward_sum,
                  unit: str = "builds", history: list[dict[str, float]] | None = None) -> dict[str, Any]:
    """The policy at step 0: valid-call rate over its turns and success rate (reward above 0) over its samples,
    with 95% CIs; rows that do not keep each turn's validity take the rate from step 0 of `history`, no CI."""
    first = [r for r in rows if int(r["step"]) == 0]
    valid = [float(t["valid"]) for r in first for t in r["turns"] if t.get("tokens", 0) and "valid" in t]
    success = [float(reward(r) > 0) for r in first]
    out: dict[str, Any] = {unit: len(first)}
    for name, values in (("valid_call_rate", valid), ("success_rate", success)):
        if values:
            ci = bootstrap_ci(values, seed=0)
            out[name], out[f"{name}_ci"] = ci.point, ci.as_list()
        elif history:
            out[name] = float(history[0].get(name, float("nan")))
    return out


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def plot(path: Path, fast: dict[str, float], base: dict[str, float], unit: str = "builds") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [f"{unit}_per_minute", "tokens_per_second_rollout", "learner_seconds_per_step", "probe_seconds_per_step"]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4))
    for ax, key in zip(axes, keys, strict=True):
        ax.bar(["baseline", "fast"], [base[key], fast[key]], color=["#999999", "#3366cc"])
        ax.set_title(key.replace("_", " "), fontsize=9)
    speedup = fast[f"{unit}_per_minute"] / base[f"{unit}_per_minute"]
    fig.suptitle(f"RL step throughput, learning preset: {speedup:.1f}x {unit} a minute (steps after the first)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pipeline", choices=sorted(PIPELINES), default="builder")
    ap.add_argument("--config", default="", help="the preset (default: the pipeline's learning preset)")
    ap.add_argument("--steps", type=int, default=3, help="GRPO steps a run (the first is a warm-up)")
    ap.add_argument("--init-from", default="", metavar="DIR",
                    help="an earlier run's SFT warm start of the same preset (OUT/baseline/checkpoints/sft) for "
                         "both runs: the baseline's SFT is skipped")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for both runs")
    args = ap.parse_args(argv)
    if args.init_from and not Path(args.init_from).is_dir():
        raise SystemExit(f"--init-from {args.init_from}: no such warm-start folder")
    if args.steps < 2:
        raise SystemExit("--steps must be at least 2 (the first step is a warm-up)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pipeline = PIPELINES[args.pipeline]
    config = args.config or pipeline.default_config
    common = [*pipeline.common, f"steps={args.steps}", *args.overrides]
    started = time.perf_counter()
    given = [f"sft.init_from={args.init_from}"] if args.init_from else []
    base = run_pipeline(pipeline, config, out / "baseline", [*common, *given])
    warm = Path(args.init_from) if args.init_from else out / "baseline" / "checkpoints" / "sft"
    fast = run_pipeline(pipeline, config, out / "fast",
                        [*common, *pipeline.fast, *([f"sft.init_from={warm}"] if warm.exists() else [])])
    base_rows, fast_rows = read_rows(out / "baseline"), read_rows(out / "fast")
    unit = pipeline.unit
    base_rates, fast_rates = rates(base["history"], base_rows, unit), rates(fast["history"], fast_rows, unit)
    q_base = step0_quality(base_rows, pipeline.reward, unit, base["history"])
    q_fast = step0_quality(fast_rows, pipeline.reward, unit, fast["history"])
    results: dict[str, Any] = {
        "pipeline": args.pipeline, "config": config, "steps": args.steps, "overrides": args.overrides,
        "fast_overrides": list(pipeline.fast), "init_from": args.init_from,
        **fast_rates, **{f"baseline_{k}": v for k, v in base_rates.items()},
        "speedup": fast_rates[f"{unit}_per_minute"] / base_rates[f"{unit}_per_minute"], "target": TARGET,
        "step0": q_fast, "baseline_step0": q_base,
        "quality_same": all(overlap(q_fast[f"{k}_ci"], q_base[f"{k}_ci"]) for k in ("valid_call_rate",
                                                                                      "success_rate")
                            if f"{k}_ci" in q_fast and f"{k}_ci" in q_base),
        "wall_s": time.perf_counter() - started, "load_average": os.getloadavg(),
        "runs": {"baseline": str(out / "baseline"), "fast": str(out / "fast")},
    }
    results["met"] = results["speedup"] >= TARGET and results["quality_same"]
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot(out / "throughput.png", fast_rates, base_rates, unit)
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=2))
    print(f"wrote {out / 'results.json'} and {out / 'throughput.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
