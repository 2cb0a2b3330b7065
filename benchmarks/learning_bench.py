"""Does the builder learn? `train_builder` on a task with headroom, against a control run with a learning rate of 0.

    python benchmarks/learning_bench.py --out build/bench/learning [--config configs/learning_builder.yaml]
        [--steps 12] [--ends 3] [key=value ...]

Two runs of `librarian train_builder` with the same seeds (SmolLM2-135M-Instruct with LoRA, tool calls under
the tools' grammar, an SFT warm start from the scripted builder, multi-turn GRPO on probe rewards):

- `run`: the config as given; its exam examines the flat store, the scripted builder and the policy before
  SFT (`untrained`), after SFT (`sft_only`) and after GRPO (`trained`) on the held-out corpora;
- `control`: the same with `learner.lr=0` for GRPO (SFT keeps the run's learning rate, `sft.lr`), so its
  GRPO steps sample from the SFT policy and change nothing: any reward gain it shows is noise.

OUT/results.json holds `valid_call_rate` (per step), `reward_per_step` and `control_reward_per_step`, `reward_gain`
(mean build reward of the last `--ends` steps minus the first, 3 by default) with `reward_gain_ci` (bootstrap
95%, builds resampled within each end) and the same for the control, `ends_by_corpus` (each corpus trained on at
both ends: its mean build reward at each end, run and control), `gain_over_control` with `gain_over_control_ci`
(run minus control build by build at each step after the first: the same corpus and seeds, so corpus difficulty
cancels; whole steps resampled), `nonzero_advantage_fraction` (per step: the share of groups whose advantages are not all zero), the
exam utilities `exam_utility_flat|scripted|trained| sft_only|untrained` (mean U per question, with CIs) and
`exam_trained_minus_untrained_ci` (paired bootstrap over questions), the targets and whether each is met, a
`verdict` (one sentence: learning counts only when the control's gain is noise and the run beats it), what the
policy does (`tool_rates`: per tool, the share of builds calling it at each step, run and control;
`late_tool_shift`: per tool, run minus control over the last 6 steps with a CI over whole steps), timings, and
both runs' folders. OUT/learning.png plots the reward per step of both runs and the valid-call rate,
OUT/behaviour.png the tool shares. This measures learning, not the machinery: the behaviour shift says whether
the updates changed what the policy does on corpora it sees once, the reward figures whether that paid.
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

from librarian.config import load_config, to_plain  # noqa: E402
from librarian.evaluation.behaviour_shift import behaviour_fields, plot_behaviour  # noqa: E402
from librarian.evaluation.learning_curves import (  # noqa: E402
    bench_args,
    ends_by_corpus,
    learning_verdict,
    over_control_fields,
    plot_learning,
    pool_report,
    read_results,
    reward_gain,
    rewards_by_step,
    run_concurrently,
    shared_warm_start,
    turn_reward_sum,
)
from librarian.pipelines.builder.config import TrainBuilderConfig  # noqa: E402
from librarian.pipelines.builder.train import check, run  # noqa: E402

DEFAULT_CONFIG = "configs/learning_builder.yaml"
EXAM_NAMES = {"flat": "flat", "scripted": "scripted_builder", "trained": "trained_builder",
              "sft_only": "sft_builder", "untrained": "untrained_builder"}


def run_pipeline(config: str, out: Path, overrides: list[str]) -> dict[str, Any]:
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


RUN_EXTRA = ["exam.untrained=true", "exam.sft_only=true"]


def main(argv: list[str] | None = None) -> int:
    args, out, common = bench_args(__doc__.split("\n\n")[0], DEFAULT_CONFIG, argv)
    started = time.perf_counter()
    if args.pool:  # earlier OUT folders, pooled: nothing runs
        try:
            print(json.dumps(pool_report(out, [Path(p) for p in args.pool], turn_reward_sum), indent=2))
        except ValueError as exc:
            raise SystemExit(f"--pool: {exc}") from None
        return 0
    if args.only == "run":
        run_pipeline(args.config, out / "run", [*common, *RUN_EXTRA])
        return 0
    if args.only == "control":
        run_pipeline(args.config, out / "control", control_overrides(common, resolved(args.config, common)))
        return 0
    if args.report:  # both halves already ran (--only run and --only control)
        run, control = read_results(out)
        return report(out, args, run, run.get("wall_s", 0.0), control.get("wall_s", 0.0))
    if args.concurrent:  # two processes, two local Ray clusters: the control no longer waits for the run
        run, _ = run_concurrently(__file__, args, out)
        wall = time.perf_counter() - started
        return report(out, args, run, wall, wall)
    run = run_pipeline(args.config, out / "run", [*common, *RUN_EXTRA])
    run_s = time.perf_counter() - started
    run_pipeline(args.config, out / "control",
                 [*control_overrides(common, run["config"]), *shared_warm_start(out, common)])
    control_s = time.perf_counter() - started - run_s
    return report(out, args, run, run_s, control_s)


def resolved(config: str, overrides: list[str]) -> dict[str, Any]:
    """The run's resolved config as plain data (what `control_overrides` reads)."""
    return to_plain(load_config(TrainBuilderConfig, overrides, config_file=config))


def control_overrides(common: list[str], run_config: dict[str, Any]) -> list[str]:
    """The control: the run's settings with GRPO's learning rate 0 (SFT keeps the run's) and no exam."""
    lr = run_config["learner"]["lr"]
    sft_lr = run_config["sft"].get("lr") or lr
    return [*common, "learner.lr=0", f"sft.lr={sft_lr}", "exam.enabled=false"]


def report(out: Path, args: Any, run: dict[str, Any], run_s: float, control_s: float) -> int:
    """results.json and learning.png from the two runs' folders."""
    per_step = rewards_by_step(out / "run", turn_reward_sum)
    control_per_step = rewards_by_step(out / "control", turn_reward_sum)
    history = run["history"]
    valid = [float(h.get("valid_call_rate", 0.0)) for h in history]
    run_gain, control_gain = reward_gain(per_step, args.ends), reward_gain(control_per_step, args.ends)
    results: dict[str, Any] = {
        "config": args.config, "steps": args.steps, "overrides": args.overrides,
        "valid_call_rate": valid,
        "reward_per_step": [statistics.fmean(v) for v in per_step.values()],
        "control_reward_per_step": [statistics.fmean(v) for v in control_per_step.values()],
        "reward_gain_ends": run_gain["ends"], "reward_gain": run_gain["gain"], "reward_gain_ci": run_gain["ci"],
        "control_reward_gain": control_gain["gain"], "control_reward_gain_ci": control_gain["ci"],
        "ends_by_corpus": {which: ends_by_corpus(out / which, turn_reward_sum, args.ends) for which in ("run", "control")},
        **over_control_fields(per_step, control_per_step),
        "nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0)) for h in history],
        "sft": run.get("sft", {}), **exam_figures(run), **behaviour_fields(out / "run", out / "control"),
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
    results["verdict"] = learning_verdict(results["reward_gain_ci"], results["control_reward_gain_ci"],
                                          results.get("gain_over_control_ci"))
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot_learning(out / "learning.png", results["reward_per_step"], results["control_reward_per_step"], valid,
                  results["nonzero_advantage_fraction"])
    plot_behaviour(out / "behaviour.png", results["tool_rates"])
    print(json.dumps({k: v for k, v in results.items() if k not in ("sft", "tool_rates")}, indent=2))
    print(f"verdict: {results['verdict']}")
    print(f"wrote {out / 'results.json'} and {out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
