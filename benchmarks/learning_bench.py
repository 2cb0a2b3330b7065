"""Does the builder learn, and does it transfer? `train_builder` against a control run with a learning rate of 0.

    python benchmarks/learning_bench.py --out build/bench/learning [--config configs/learning_builder.yaml]
        [--steps 12] [--ends 3] [key=value ...]
    python benchmarks/learning_bench.py --out build/bench/transfer --pool DIR1 DIR2 DIR3    # seeds pooled

Two runs of `librarian train_builder` with the same seeds (SmolLM2-135M-Instruct with LoRA, tool calls under
the tools' grammar, an SFT warm start from the scripted builder, multi-turn GRPO on probe rewards):

- `run`: the config as given; its exam examines the flat store, the scripted builder and the policy before
  SFT (`untrained`), after SFT (`sft_only`) and after GRPO (`trained`) on the held-out corpora;
- `control`: the same with `learner.lr=0` for GRPO, starting from the run's saved warm start, so its GRPO steps
  sample from the SFT policy and change nothing: any reward gain it shows is noise.

Every interval over builds resamples whole units (the corpus a build was made of): builds of one corpus are not
independent evidence. OUT/results.json holds `valid_call_rate` and `executed_call_rate` (per step),
`reward_per_step` and `control_reward_per_step`, `reward_gain` (mean build reward of the last `--ends` steps minus
the first, 3 by default; corpora at both ends paired with themselves) with `reward_gain_ci` and the same for the
control, `ends_by_corpus`, `gain_over_control` with its CI (run minus control build by build at each step after
the first: the same corpus and seeds), `nonzero_advantage_fraction`, the exam (`exam_utility_*`, and with a keep
set and `exam.samples`: `exam_solve_rate_<store>_<greedy|sampled>` on the hard corpora, `exam_break_rate_...` on
the keep set, `exam_trained_minus_untrained` and `exam_trained_minus_sft_only` with corpus-clustered CIs;
`evaluation/transfer.py`), how far GRPO moved the policy (`policy_shift`: the LoRA weight change from the warm
start, and the KL from the SFT policy on the trained policy's held-out exam builds), the warm start's `gate`, the
targets, a `verdict`, what the policy does (`tool_rates`, `late_tool_shift`), timings and both runs' folders.
OUT/learning.png and OUT/behaviour.png plot them. results.json also keeps what pooling needs (`exam`, per corpus,
and `pool_inputs`, both runs' build rewards per step), so that it alone stands for its seed: `--pool` reads earlier
OUT folders or their results.json files (a committed `benchmarks/results/transfer/seed<N>.json`), one a seed, and writes
OUT/pooled.json with the seed as the unit: per-seed figures, the between-seed interval and, for the exam
differences, the crossed seeds x corpora interval; OUT/pooled.png plots each store's solve rate, seed by seed.
"""

from __future__ import annotations

import copy
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
    POOL_INPUTS,
    bench_args,
    ends_by_corpus,
    learning_verdict,
    over_control_fields,
    plot_learning,
    pool_inputs,
    pool_report,
    read_results,
    reward_gain,
    run_concurrently,
    shared_warm_start,
    turn_reward_sum,
    unit_rewards_by_step,
)
from librarian.evaluation.plots import plot_pooled_exam  # noqa: E402
from librarian.evaluation.transfer import pooled_fields, run_fields  # noqa: E402
from librarian.learner import Learner  # noqa: E402
from librarian.learner.policy_shift import checkpoint_shift, kl_on_samples, trajectory_samples  # noqa: E402
from librarian.models import make_backend  # noqa: E402
from librarian.pipelines.builder.config import TrainBuilderConfig  # noqa: E402
from librarian.pipelines.builder.train import (  # noqa: E402
    EXAM_SAMPLES,  # noqa: E402
    check,
    run,
)
from librarian.rl.session import learner_model  # noqa: E402
from librarian.roles.trajectory import Trajectory  # noqa: E402

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
            pooled = pool_report(out, [Path(p) for p in args.pool], turn_reward_sum, extra=pooled_fields)
        except ValueError as exc:
            raise SystemExit(f"--pool: {exc}") from None
        print(json.dumps(pooled, indent=2))
        if pooled.get("per_seed"):  # seeds with an exam: the comparison, plotted
            print(f"wrote {plot_pooled_exam(pooled, out / 'pooled.png')}")
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
    """The control: the run's settings with GRPO's learning rate 0 (SFT keeps the run's), no exam and no warm-start
    gate (the run measured it on the same warm start)."""
    lr = run_config["learner"]["lr"]
    sft_lr = run_config["sft"].get("lr") or lr
    return [*common, "learner.lr=0", f"sft.lr={sft_lr}", "exam.enabled=false", "sft.min_success=0",
            "data.val_corpora=0"]


KL_SAMPLES = 16  # the trained policy's sampled exam builds the KL to the SFT policy is measured on


def shift_of(run: dict[str, Any]) -> dict[str, Any]:
    """How far GRPO moved the policy from its warm start (`learner.policy_shift`; the run's saved SFT checkpoint, or
    the one it loaded with `sft.init_from`), when both checkpoints exist: the
    LoRA Delta W's change, and KL(trained || SFT) on the first `KL_SAMPLES` sampled exam builds of the trained
    policy (held-out corpora), both policies scored by a learner in this process."""
    out_dir = Path(run["config"]["out_dir"])
    loaded = run["config"].get("sft", {}).get("init_from")  # a shared warm start the run loaded, not saved
    sft, final = Path(loaded) if loaded else out_dir / "checkpoints" / "sft", run.get("final_checkpoint")
    if not final or not (sft / "learner.json").is_file():
        return {}
    shift: dict[str, Any] = {"weights": checkpoint_shift(str(sft), final)}
    samples_file = out_dir / EXAM_SAMPLES
    if samples_file.is_file():
        cfg = load_config(TrainBuilderConfig, [], config_file=str(out_dir / "config.yaml"))
        lines = samples_file.read_text(encoding="utf-8").splitlines()[:KL_SAMPLES]
        samples = trajectory_samples([Trajectory.from_dict(json.loads(line)["trajectory"]) for line in lines])
        backend, options = learner_model(cfg.rollout)
        policy = make_backend(backend, **options)

        def logprobs(folder: str, batch: Any) -> list[float]:
            learner = Learner(copy.deepcopy(policy.model), cfg.learner, pad_id=policy.pad_id, tokenizer=policy.tokenizer)
            learner.load(folder)
            return learner.sequence_logprobs(batch)

        if samples:
            shift["kl_to_sft"] = kl_on_samples(logprobs, final, str(sft), samples)
    return shift


def targets(results: dict[str, Any], valid: list[float]) -> dict[str, bool]:
    """The targets and whether each is met (the exam's only where the run measured them)."""
    def above(name: str) -> bool:
        return bool(results.get(name)) and results[name][0] > 0

    out = {"reward_gain_ci_low_above_0": results["reward_gain_ci"][0] > 0,
           "control_reward_gain_ci_contains_0": results["control_reward_gain_ci"][0] <= 0 <= results[
               "control_reward_gain_ci"][1],
           "valid_call_rate_at_least_0.99": bool(valid) and min(valid) >= 0.99,
           "exam_trained_minus_untrained_ci_low_above_0": above("exam_trained_minus_untrained_ci")}
    if "exam_trained_minus_sft_only_ci" in results:
        out["exam_trained_minus_sft_only_ci_low_above_0"] = above("exam_trained_minus_sft_only_ci")
    trained, untrained = results.get("exam_break_rate_trained_sampled"), results.get("exam_break_rate_untrained_sampled")
    if trained is not None and untrained is not None:
        out["exam_break_rate_trained_at_most_untrained_plus_0.05"] = trained <= untrained + 0.05
    return out


def exam_record(exam: dict[str, Any]) -> dict[str, Any]:
    """The run's exam as `--pool` reads it (per-corpus utilities and the rates), kept in results.json so that the
    file alone stands for its seed."""
    return {k: exam[k] for k in ("corpora", "rates") if k in exam}


def report(out: Path, args: Any, run: dict[str, Any], run_s: float, control_s: float) -> int:
    """results.json and learning.png from the two runs' folders."""
    per_step = unit_rewards_by_step(out / "run", turn_reward_sum)  # (corpus, build reward) per build
    control_per_step = unit_rewards_by_step(out / "control", turn_reward_sum)
    history = run["history"]
    valid = [float(h.get("valid_call_rate", 0.0)) for h in history]
    run_gain, control_gain = reward_gain(per_step, args.ends), reward_gain(control_per_step, args.ends)
    results: dict[str, Any] = {
        "config": args.config, "steps": args.steps, "overrides": args.overrides,
        "valid_call_rate": valid, "executed_call_rate": [float(h.get("executed_call_rate", 0.0)) for h in history],
        "reward_per_step": [statistics.fmean(r for _, r in v) for v in per_step.values()],
        "control_reward_per_step": [statistics.fmean(r for _, r in v) for v in control_per_step.values()],
        "reward_gain_ends": run_gain["ends"], "reward_gain": run_gain["gain"], "reward_gain_ci": run_gain["ci"],
        "reward_gain_paired_corpora": run_gain["paired"],
        "control_reward_gain": control_gain["gain"], "control_reward_gain_ci": control_gain["ci"],
        "ends_by_corpus": {which: ends_by_corpus(out / which, turn_reward_sum, args.ends) for which in ("run", "control")},
        **over_control_fields(per_step, control_per_step),
        "nonzero_advantage_fraction": [float(h.get("nonzero_advantage_fraction", 0.0)) for h in history],
        "sft": run.get("sft", {}), "gate": run.get("gate", {}), **exam_figures(run), **run_fields(run.get("exam") or {}),
        "policy_shift": shift_of(run), **behaviour_fields(out / "run", out / "control"),
        "run_s": run_s, "control_s": control_s, "run_dir": str(out / "run"), "control_dir": str(out / "control"),
        "exam": exam_record(run.get("exam") or {}), POOL_INPUTS: pool_inputs(out, turn_reward_sum),
    }
    results["targets"] = targets(results, valid)
    results["verdict"] = learning_verdict(results["reward_gain_ci"], results["control_reward_gain_ci"],
                                          results.get("gain_over_control_ci"))
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    plot_learning(out / "learning.png", results["reward_per_step"], results["control_reward_per_step"], valid,
                  results["nonzero_advantage_fraction"])
    plot_behaviour(out / "behaviour.png", results["tool_rates"])
    print(json.dumps({k: v for k, v in results.items() if k not in ("sft", "tool_rates", "exam", POOL_INPUTS)},
                     indent=2))
    print(f"verdict: {results['verdict']}")
    print(f"wrote {out / 'results.json'} and {out / 'learning.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
