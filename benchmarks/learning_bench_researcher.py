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

OUT/results.json holds `valid_call_rate` (per GRPO step: the share of policy turns whose message parsed into tool
calls with no call error), `source_recall_per_step` and `control_source_recall_per_step` (mean source recall of the
step's trajectories, from each run's trajectories.jsonl), `reward_gain` (mean per-trajectory source recall of the
last `--ends` steps minus the first, 3 by default) with `reward_gain_ci` (bootstrap 95% over questions: a question at
both ends is paired with itself, whole questions resampled) and
the same for the control, `gain_over_control` with `gain_over_control_ci` (run minus control build by build at each
step after the first: the same question and seeds, so question difficulty cancels; whole questions resampled),
`nonzero_advantage_fraction` (per step: the share of question groups whose advantages are not all zero, i.e. whose
G trajectories did not all get the same recall), the evaluation's `eval_source_recall_trained|sft_only` (the run's
and the control's policy on the test questions, with CIs), `eval_trained_minus_sft_only` (paired bootstrap over
questions), the scripted researcher's `eval_source_recall_scripted_<arm>` (a reference at the evaluation budget),
the targets and whether each is met, a `verdict` (one sentence: learning counts only when the control's gain is
noise and the run beats it), `tool_rates` and `late_tool_shift` (the share of trajectories calling each tool per
step, run and control, and run minus control over the last 6 steps with a CI), timings and both runs' folders.
OUT/learning.png plots the source recall per step of both runs, the valid-call rate and the nonzero-advantage
fraction; OUT/behaviour.png the tool shares. This measures learning, not the
machinery.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from librarian.config import load_config  # noqa: E402
from librarian.evaluation.behaviour_shift import behaviour_fields, plot_behaviour  # noqa: E402
from librarian.evaluation.learning_curves import (  # noqa: E402
    bench_args,
    learning_verdict,
    over_control_fields,
    plot_learning,
    pool_report,
    read_results,
    reward_gain,
    run_concurrently,
    shared_warm_start,
    unit_rewards_by_step,
)
from librarian.evaluation.metrics.bootstrap import paired_bootstrap_ci  # noqa: E402
from librarian.pipelines.researcher.config import TrainResearcherConfig  # noqa: E402
from librarian.pipelines.researcher.train import check, run  # noqa: E402

DEFAULT_CONFIG = "configs/researcher_learning.yaml"


def load(config: str, overrides: list[str]) -> Any:
    """The researcher config the benchmark runs (the file plus the overrides)."""
    return load_config(TrainResearcherConfig, overrides, config_file=config)


def run_pipeline(config: str, out: Path, overrides: list[str]) -> dict[str, Any]:
    cfg = load(config, [*overrides, f"out_dir={out}"])
    check(cfg)
    return run(cfg)


def control_overrides(common: list[str], sft_lr: float) -> list[str]:
    """The control: GRPO's learning rate 0 (SFT keeps the run's), and only the hierarchical scripted arm."""
    return [*common, "learner.lr=0", f"sft.lr={sft_lr}", "eval.arms=[hierarchical]"]


def eval_figures(run: dict[str, Any], control: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The trained (run) and SFT-only (control) policies on the test questions, their paired difference, and
    the scripted researcher's recall on each evaluated arm."""
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


def main(argv: list[str] | None = None) -> int:
    args, out, common = bench_args(__doc__.split("\n\n")[0], DEFAULT_CONFIG, argv)
    started = time.perf_counter()
    if args.pool:  # earlier OUT folders, pooled: nothing runs
        try:
            print(json.dumps(pool_report(out, [Path(p) for p in args.pool], lambda row: row["reward"]), indent=2))
        except ValueError as exc:
            raise SystemExit(f"--pool: {exc}") from None
        return 0
    resolved = load(args.config, common)
    sft_lr = resolved.sft.lr or resolved.learner.lr  # the control's SFT is the run's
    if args.only == "run":
        run_pipeline(args.config, out / "run", common)
        return 0
    if args.only == "control":
        run_pipeline(args.config, out / "control", control_overrides(common, sft_lr))
        return 0
    if args.report:  # both halves already ran (e.g. with --only, one after the other or in two sessions)
        run, control = read_results(out)
        run_s, control_s = run.get("wall_s", 0.0), control.get("wall_s", 0.0)
    elif args.concurrent:  # two processes, two local Ray clusters: the control no longer waits for the run
        run, control = run_concurrently(__file__, args, out)
        run_s = control_s = time.perf_counter() - started
    else:
        run = run_pipeline(args.config, out / "run", common)
        run_s = time.perf_counter() - started
        control = run_pipeline(args.config, out / "control",
                               [*control_overrides(common, sft_lr), *shared_warm_start(out, common)])
        control_s = time.perf_counter() - started - run_s
    per_step = unit_rewards_by_step(out / "run", lambda row: row["reward"])  # (question, recall) per trajectory
    control_per_step = unit_rewards_by_step(out / "control", lambda row: row["reward"])
    history, control_history = run["history"], control["history"]
    valid = [float(h.get("valid_call_rate", 0.0)) for h in history]
    run_gain, control_gain = reward_gain(per_step, args.ends), reward_gain(control_per_step, args.ends)
    results: dict[str, Any] = {
        "config": args.config, "steps": args.steps, "overrides": args.overrides, "gain_ends": run_gain["ends"],
        "valid_call_rate": valid,
        "control_valid_call_rate": [float(h.get("valid_call_rate", 0.0)) for h in control_history],
        "source_recall_per_step": [statistics.fmean(r for _, r in v) for v in per_step.values()],
        "control_source_recall_per_step": [statistics.fmean(r for _, r in v) for v in control_per_step.values()],
        "reward_gain": run_gain["gain"], "reward_gain_ci": run_gain["ci"],
        "control_reward_gain": control_gain["gain"], "control_reward_gain_ci": control_gain["ci"],
        **over_control_fields(per_step, control_per_step),
        "nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0)) for h in history],
        "control_nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0))
                                               for h in control_history],
        "tool_errors_per_step": [float(h.get("tool_errors", 0.0)) for h in history],
        "rounds_per_step": [float(h.get("rounds", 0.0)) for h in history],
        "sft": run.get("sft", {}), "control_sft": control.get("sft", {}), **eval_figures(run, control),
        "trainable_norm": run.get("trainable_norm", {}), "control_trainable_norm": control.get("trainable_norm", {}),
        **behaviour_fields(out / "run", out / "control"),
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
    results["verdict"] = learning_verdict(results["reward_gain_ci"], results["control_reward_gain_ci"],
                                          results.get("gain_over_control_ci"))
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot_learning(out / "learning.png", results["source_recall_per_step"], results["control_source_recall_per_step"],
                  valid, results["nonzero_advantage_fraction"], ylabel="mean source recall")
    plot_behaviour(out / "behaviour.png", results["tool_rates"], unit="trajectories")
    print(json.dumps({k: v for k, v in results.items() if k not in ("sft", "control_sft", "tool_rates")}, indent=2))
    print(f"verdict: {results['verdict']}")
    print(f"wrote {out / 'results.json'} and {out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
