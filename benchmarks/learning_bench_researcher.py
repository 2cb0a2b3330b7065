"""Does the researcher learn? `train_researcher` on a task with headroom, against a control run with a learning rate of 0.

    python benchmarks/learning_bench_researcher.py --out build/bench/learning_researcher
        [--config configs/researcher_learning.yaml] [--steps 12] [key=value ...]

Two runs of `librarian train_researcher` with the same seeds (SmolLM2-135M-Instruct with LoRA, tool calls under
the tools' grammar with a short thought before them, verified-trajectory SFT from the scripted researcher, then
hint-guided outcome GRPO with the source-recall reward):

- `run`: the config as given; its evaluation has the trained policy research the test questions (greedy, no
  hints) next to the scripted researcher on the configured arms;
- `control`: the same with `learner.lr=0` for GRPO (SFT keeps the run's learning rate, `sft.lr`), so its GRPO
  steps sample from the SFT policy and change nothing: any reward gain it shows is noise, and its evaluation
  of the "trained" policy is the SFT-only policy on the same questions (arms cut to `hierarchical`).

OUT/results.json holds `valid_call_rate` (per GRPO step: the share of policy turns whose message parsed into
tool calls with no call error), `source_recall_per_step` and `control_source_recall_per_step` (mean source
recall of the step's trajectories, from each run's trajectories.jsonl), `reward_gain` (mean per-trajectory
source recall of the last 3 steps minus the first 3) with `reward_gain_ci` (bootstrap 95%, trajectories
resampled within each end) and the same for the control, `nonzero_advantage_fraction` (per step: the share of
question groups whose advantages are not all zero, i.e. whose G trajectories did not all get the same recall),
the evaluation's `eval_source_recall_trained|sft_only` (the run's and the control's policy on the test
questions, with CIs), `eval_trained_minus_sft_only` (paired bootstrap over questions), the scripted
researcher's `eval_source_recall_scripted_<arm>` (a reference at the evaluation budget), the targets and
whether each is met, timings and both runs' folders. OUT/learning.png plots the source recall per step of both
runs, the valid-call rate and the nonzero-advantage fraction. This measures learning, not the machinery.
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

DEFAULT_CONFIG = "configs/researcher_learning.yaml"
ENDS = 3  # steps averaged at each end of a run for the reward gain


def trajectory_recalls(run_dir: Path) -> dict[int, list[float]]:
    """Step -> every GRPO trajectory's source recall (its reward), from a run's trajectories.jsonl."""
    out: dict[int, list[float]] = {}
    with (run_dir / "trajectories.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.setdefault(int(row["step"]), []).append(float(row["reward"]))
    return dict(sorted(out.items()))


def gain(per_step: dict[int, list[float]], ends: int = ENDS, seed: int = 0) -> dict[str, Any]:
    """Mean source recall of the last `ends` steps minus the first `ends`, with a bootstrap 95% CI (fewer ends
    when the run is shorter than 2 x `ends` steps: a smoke run)."""
    from librarian.evaluation.metrics.bootstrap import unpaired_difference_ci

    steps = sorted(per_step)
    if len(steps) < 2:
        raise SystemExit(f"learning_bench_researcher needs at least 2 GRPO steps, the run has {len(steps)}")
    ends = min(ends, len(steps) // 2)
    first = [r for s in steps[:ends] for r in per_step[s]]
    last = [r for s in steps[-ends:] for r in per_step[s]]
    ci = unpaired_difference_ci(last, first, seed=seed)
    return {"gain": ci.point, "ci": ci.as_list(), "ends": ends}


def run_pipeline(config: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    from librarian.config import load_config
    from librarian.pipelines.researcher_config import TrainResearcherConfig
    from librarian.pipelines.train_researcher import check, run

    cfg = load_config(TrainResearcherConfig, [*overrides, f"out_dir={out}"], config_file=config)
    check(cfg)
    return run(cfg)


def eval_figures(run: dict[str, Any], control: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The trained (run) and SFT-only (control) policies on the test questions, their paired difference, and
    the scripted researcher's recall on each evaluated arm."""
    from librarian.evaluation.metrics.bootstrap import paired_bootstrap_ci

    out: dict[str, Any] = {}
    for name, res in (("trained", run), ("sft_only", control)):
        t = res.get("trained") or {}
        if t:
            out[f"eval_source_recall_{name}"] = t["source_recall"]
            out[f"eval_source_recall_{name}_ci"] = t["source_recall_ci"]
            out[f"eval_valid_call_rate_{name}"] = t.get("valid_call_rate")
    a = (run.get("trained") or {}).get("per_question", {})
    b = (control.get("trained") or {}).get("per_question", {})
    common = [q for q in a if q in b]
    if common:
        ci = paired_bootstrap_ci([a[q] for q in common], [b[q] for q in common], seed=seed)
        out["eval_trained_minus_sft_only"] = ci.point
        out["eval_trained_minus_sft_only_ci"] = ci.as_list()
        out["eval_questions"] = len(common)
    for arm, fig in (run.get("arms") or {}).items():
        out[f"eval_source_recall_scripted_{arm}"] = fig["source_recall"]
        out[f"eval_source_recall_scripted_{arm}_ci"] = fig["source_recall_ci"]
    return out


def plot(path: Path, run_recall: list[float], control_recall: list[float], valid: list[float],
         nonzero: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(range(len(run_recall)), run_recall, marker="o", label="GRPO (run)")
    a.plot(range(len(control_recall)), control_recall, marker="s", label="learner.lr=0 (control)")
    a.set_xlabel("GRPO step")
    a.set_ylabel("mean source recall")
    a.set_title("source recall per step")
    a.legend()
    b.plot(range(len(valid)), valid, marker="o", color="tab:green", label="valid tool-call rate")
    b.plot(range(len(nonzero)), nonzero, marker="^", color="tab:red", label="groups with nonzero advantages")
    b.set_ylim(-0.05, 1.05)
    b.set_xlabel("GRPO step")
    b.set_title("run: valid calls and GRPO signal")
    b.legend(fontsize=8)
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
    run = run_pipeline(args.config, out / "run", common)
    lr = run["config"]["learner"]["lr"]
    sft_lr = run["config"]["sft"]["lr"] or lr
    run_s = time.perf_counter() - started
    control = run_pipeline(args.config, out / "control", [*common, "learner.lr=0", f"sft.lr={sft_lr}",
                                                          "eval.arms=[hierarchical]"])
    control_s = time.perf_counter() - started - run_s
    per_step, control_per_step = trajectory_recalls(out / "run"), trajectory_recalls(out / "control")
    history, control_history = run["history"], control["history"]
    valid = [float(h.get("valid_call_rate", 0.0)) for h in history]
    run_gain, control_gain = gain(per_step), gain(control_per_step)
    results: dict[str, Any] = {
        "config": args.config, "steps": args.steps, "overrides": args.overrides, "gain_ends": run_gain["ends"],
        "valid_call_rate": valid,
        "control_valid_call_rate": [float(h.get("valid_call_rate", 0.0)) for h in control_history],
        "source_recall_per_step": [statistics.fmean(v) for v in per_step.values()],
        "control_source_recall_per_step": [statistics.fmean(v) for v in control_per_step.values()],
        "reward_gain": run_gain["gain"], "reward_gain_ci": run_gain["ci"],
        "control_reward_gain": control_gain["gain"], "control_reward_gain_ci": control_gain["ci"],
        "nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0)) for h in history],
        "control_nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0))
                                               for h in control_history],
        "tool_errors_per_step": [float(h.get("tool_errors", 0.0)) for h in history],
        "rounds_per_step": [float(h.get("rounds", 0.0)) for h in history],
        "sft": run.get("sft", {}), "control_sft": control.get("sft", {}), **eval_figures(run, control),
        "trainable_norm": run.get("trainable_norm", {}), "control_trainable_norm": control.get("trainable_norm", {}),
        "run_s": run_s, "control_s": control_s, "run_dir": str(out / "run"), "control_dir": str(out / "control"),
    }
    diff_ci = results.get("eval_trained_minus_sft_only_ci", [float("nan")] * 2)
    results["targets"] = {
        "reward_gain_ci_low_above_0": results["reward_gain_ci"][0] > 0,
        "control_reward_gain_ci_contains_0": results["control_reward_gain_ci"][0] <= 0 <= results[
            "control_reward_gain_ci"][1],
        "valid_call_rate_at_least_0.99": bool(valid) and min(valid) >= 0.99,
        "nonzero_advantage_fraction_mean_at_least_0.5": bool(history) and statistics.fmean(
            results["nonzero_advantage_fraction"]) >= 0.5,
        "eval_trained_minus_sft_only_ci_low_above_0": diff_ci[0] > 0,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot(out / "learning.png", results["source_recall_per_step"], results["control_source_recall_per_step"], valid,
         results["nonzero_advantage_fraction"])
    print(json.dumps({k: v for k, v in results.items() if k not in ("sft", "control_sft")}, indent=2))
    print(f"wrote {out / 'results.json'} and {out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
