"""Does the builder learn? `train_builder` on a task with headroom, against a control run with a learning rate of 0.

    python benchmarks/learning_bench.py --out build/bench/learning [--config configs/learning_builder.yaml]
        [--steps 12] [key=value ...]

Two runs of `librarian train_builder` with the same seeds (SmolLM2-135M-Instruct with LoRA, tool calls under
the tools' grammar, an SFT warm start from the scripted builder, multi-turn GRPO on probe rewards):

- `run`: the config as given; its exam examines the flat store, the scripted builder and the policy before
  SFT (`untrained`), after SFT (`sft_only`) and after GRPO (`trained`) on the held-out corpora;
- `control`: the same with `learner.lr=0` for GRPO (SFT keeps the run's learning rate, `sft.lr`), so its
  GRPO steps sample from the SFT policy and change nothing: any reward gain it shows is noise.

OUT/results.json holds `valid_call_rate` (per step), `reward_per_step` and `control_reward_per_step`,
`reward_gain` (mean build reward of the last 3 steps minus the first 3) with `reward_gain_ci` (bootstrap 95%,
builds resampled within each end) and the same for the control, `nonzero_advantage_fraction` (per step: the
share of groups whose advantages are not all zero), the exam utilities `exam_utility_flat|scripted|trained|
sft_only|untrained` (mean U per question, with CIs) and `exam_trained_minus_untrained_ci` (paired bootstrap
over questions), the targets and whether each is met, timings, and both runs' folders. OUT/learning.png
plots the reward per step of both runs and the valid-call rate. This measures learning, not the machinery.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

DEFAULT_CONFIG = "configs/learning_builder.yaml"
EXAM_NAMES = {"flat": "flat", "scripted": "scripted_builder", "trained": "trained_builder",
              "sft_only": "sft_builder", "untrained": "untrained_builder"}


def build_rewards(run_dir: Path) -> dict[int, list[float]]:
    """Step -> every build's total reward, from a run's trajectories.jsonl."""
    out: dict[int, list[float]] = {}
    with (run_dir / "trajectories.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.setdefault(int(row["step"]), []).append(sum(t["reward"] for t in row["turns"]))
    return dict(sorted(out.items()))


def gain(per_step: dict[int, list[float]], ends: int = 3, seed: int = 0) -> dict[str, Any]:
    """Mean build reward of the last `ends` steps minus the first `ends`, with a bootstrap 95% CI."""
    from librarian.evaluation.metrics.bootstrap import unpaired_difference_ci

    steps = sorted(per_step)
    if len(steps) < 2 * ends:
        raise SystemExit(f"learning_bench needs at least {2 * ends} GRPO steps, the run has {len(steps)}")
    first = [r for s in steps[:ends] for r in per_step[s]]
    last = [r for s in steps[-ends:] for r in per_step[s]]
    ci = unpaired_difference_ci(last, first, seed=seed)
    return {"gain": ci.point, "ci": ci.as_list()}


def run_pipeline(config: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    from librarian.config import load_config
    from librarian.pipelines.builder_config import TrainBuilderConfig
    from librarian.pipelines.train_builder import check, run

    cfg = load_config(TrainBuilderConfig, [*overrides, f"out_dir={out}"], config_file=config)
    check(cfg)
    return run(cfg)


def exam_figures(results: dict[str, Any]) -> dict[str, Any]:
    exam = results.get("exam") or {}
    utilities, differences = exam.get("utilities", {}), exam.get("differences", {})
    out: dict[str, Any] = {}
    for short, name in EXAM_NAMES.items():
        if name in utilities:
            out[f"exam_utility_{short}"] = utilities[name]["mean"]
            out[f"exam_utility_{short}_ci"] = utilities[name]["ci"]
    pairs = {"trained_minus_untrained": "trained_builder-untrained_builder",
             "trained_minus_sft_only": "trained_builder-sft_builder",
             "scripted_minus_flat": "scripted_builder-flat", "trained_minus_flat": "trained_builder-flat"}
    for short, key in pairs.items():
        if key in differences:
            out[f"exam_{short}"] = differences[key]["mean"]
            out[f"exam_{short}_ci"] = differences[key]["ci"]
    return out


def plot(path: Path, run_rewards: list[float], control_rewards: list[float], valid: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(range(len(run_rewards)), run_rewards, marker="o", label="GRPO (run)")
    a.plot(range(len(control_rewards)), control_rewards, marker="s", label="learner.lr=0 (control)")
    a.set_xlabel("GRPO step")
    a.set_ylabel("mean build reward")
    a.set_title("reward per step")
    a.legend()
    b.plot(range(len(valid)), valid, marker="o", color="tab:green")
    b.set_ylim(0, 1.05)
    b.set_xlabel("GRPO step")
    b.set_title("valid tool-call rate")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("overrides", nargs="*", help="key=value overrides for both runs")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = [f"steps={args.steps}", "checkpoint_every=0", *args.overrides]
    started = time.perf_counter()
    run = run_pipeline(args.config, out / "run", [*common, "exam.untrained=true", "exam.sft_only=true"])
    lr = run["config"]["learner"]["lr"]
    run_s = time.perf_counter() - started
    run_pipeline(args.config, out / "control", [*common, "learner.lr=0", f"sft.lr={lr}",
                                                          "exam.enabled=false"])
    control_s = time.perf_counter() - started - run_s
    per_step, control_per_step = build_rewards(out / "run"), build_rewards(out / "control")
    history = run["history"]
    valid = [float(h.get("valid_call_rate", 0.0)) for h in history]
    run_gain, control_gain = gain(per_step), gain(control_per_step)
    results: dict[str, Any] = {
        "config": args.config, "steps": args.steps, "overrides": args.overrides,
        "valid_call_rate": valid,
        "reward_per_step": [statistics.fmean(v) for v in per_step.values()],
        "control_reward_per_step": [statistics.fmean(v) for v in control_per_step.values()],
        "reward_gain": run_gain["gain"], "reward_gain_ci": run_gain["ci"],
        "control_reward_gain": control_gain["gain"], "control_reward_gain_ci": control_gain["ci"],
        "nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0)) for h in history],
        "sft": run.get("sft", {}), **exam_figures(run),
        "run_s": run_s, "control_s": control_s, "run_dir": str(out / "run"), "control_dir": str(out / "control"),
    }
    trained_ci = results.get("exam_trained_minus_untrained_ci", [float("nan")] * 2)
    results["targets"] = {
        "reward_gain_ci_low_above_0": results["reward_gain_ci"][0] > 0,
        "control_reward_gain_ci_contains_0": results["control_reward_gain_ci"][0] <= 0 <= results[
            "control_reward_gain_ci"][1],
        "valid_call_rate_at_least_0.99": bool(valid) and min(valid) >= 0.99,
        "exam_trained_minus_untrained_ci_low_above_0": trained_ci[0] > 0,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot(out / "learning.png", results["reward_per_step"], results["control_reward_per_step"], valid)
    print(json.dumps({k: v for k, v in results.items() if k not in ("sft",)}, indent=2))
    print(f"wrote {out / 'results.json'} and {out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
