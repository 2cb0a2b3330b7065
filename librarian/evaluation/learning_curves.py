"""Learning curves of an RL run against its control: per-step rewards, the gain with a CI, and the plot.

Shared by the learning benchmarks of the builder and the researcher: a run
and a control (`learner.lr=0`) each write `trajectories.jsonl`. A
trajectory belongs to a *unit*, what the policy was trained on (the
builder's corpus, the researcher's question), and trajectories of one unit
are not independent evidence, so every interval here resamples whole units:
the gain is the mean reward of the last `ends` steps minus the first `ends`,
paired unit by unit where the same units come back at both ends; the gain
over the control compares the two runs build by build at each step.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.metrics.bootstrap import cluster_bootstrap_ci, cluster_difference_ci
from librarian.evaluation.metrics.seeds import seed_interval

ENDS = 3
UNIT_KEYS = ("corpus", "question", "job")  # what a trajectories.jsonl row was trained on, first found


def turn_reward_sum(row: dict) -> float:
    """A multi-turn trajectory's reward (a builder's build): the sum of its turns' rewards, from a
    trajectories.jsonl row."""
    return sum(t["reward"] for t in row["turns"])


def row_unit(row: dict) -> str:
    """The unit a trajectories.jsonl row was trained on: its corpus (builder), question (researcher) or job."""
    return str(next(row[k] for k in UNIT_KEYS if k in row))


def unit_rewards_by_step(run_dir: Path, reward: Callable[[dict], float]) -> dict[int, list[tuple[str, float]]]:
    """Step -> every trajectory's (unit, reward) (`reward(row)`), from a run's trajectories.jsonl, in step order."""
    out: dict[int, list[tuple[str, float]]] = {}
    with (Path(run_dir) / "trajectories.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.setdefault(int(row["step"]), []).append((row_unit(row), float(reward(row))))
    return dict(sorted(out.items()))


def rewards_by_step(run_dir: Path, reward: Callable[[dict], float]) -> dict[int, list[float]]:
    """Step -> every trajectory's reward (`reward(row)`), from a run's trajectories.jsonl, in step order."""
    return {s: [r for _, r in rows] for s, rows in unit_rewards_by_step(run_dir, reward).items()}


def ends_by_corpus(run_dir: Path, reward: Callable[[dict], float], ends: int = ENDS) -> dict[str, dict[str, float]]:
    """Per unit trained on at both ends of a run (the first and the last `ends` steps): its mean reward at each
    end; {} when no unit is at both ends."""
    per_step = unit_rewards_by_step(run_dir, reward)
    steps = sorted(per_step)
    ends = min(ends, len(steps) // 2)
    if not ends:
        return {}
    first, last = _by_unit(per_step, steps[:ends]), _by_unit(per_step, steps[-ends:])
    return {u: {"first": statistics.fmean(first[u]), "last": statistics.fmean(last[u])}
            for u in sorted(first) if u in last}


def _by_unit(per_step: dict[int, list[tuple[str, float]]], steps: Sequence[int]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for s in steps:
        for unit, r in per_step[s]:
            out.setdefault(unit, []).append(r)
    return out


def reward_gain(per_step: dict[int, list[tuple[str, float]]], ends: int = ENDS, seed: int = 0) -> dict[str, Any]:
    """Mean reward of the last `ends` steps minus the first `ends`, with a 95% CI over units (fewer ends when the run
    is shorter than 2 x `ends` steps). Units trained on at both ends are paired: the gain is the mean of their
    own gains, whole units resampled (`paired` lists them); with none in common the two ends' units are resampled
    each on its own. Raises ValueError with fewer than 2 steps."""
    steps = sorted(per_step)
    if len(steps) < 2:
        raise ValueError(f"a reward gain needs at least 2 GRPO steps, the run has {len(steps)}")
    ends = min(ends, len(steps) // 2)
    first, last = _by_unit(per_step, steps[:ends]), _by_unit(per_step, steps[-ends:])
    both = sorted(u for u in first if u in last)
    if both:
        gains = [statistics.fmean(last[u]) - statistics.fmean(first[u]) for u in both]
        ci = cluster_bootstrap_ci(gains, both, seed=seed)
        return {"gain": ci.point, "ci": ci.as_list(), "ends": ends, "paired": len(both)}
    ci = cluster_difference_ci([r for u in last for r in last[u]], [u for u in last for _ in last[u]],
                               [r for u in first for r in first[u]], [u for u in first for _ in first[u]], seed=seed)
    return {"gain": ci.point, "ci": ci.as_list(), "ends": ends, "paired": 0}


def gain_over_control(run: dict[int, list[tuple[str, float]]], control: dict[int, list[tuple[str, float]]],
                      skip: int = 1, seed: int = 0) -> dict[str, Any]:
    """Mean reward of the run minus the control's, build by build at the same step (the same unit and sampling
    seeds), over the steps both have after the first `skip` (where the two are still one policy), with a 95% CI
    resampling whole units; raises ValueError when no such step exists.

    Unlike `reward_gain` it does not compare different units (the two ends of a run)."""
    steps = [s for s in sorted(set(run) & set(control)) if s >= skip]
    if not steps:
        raise ValueError(f"no GRPO step after step {skip - 1} is in both the run and the control")
    pairs = [(u, r, c) for s in steps for (u, r), (_, c) in zip(run[s], control[s], strict=True)]
    ci = cluster_bootstrap_ci([r for _, r, _ in pairs], [u for u, _, _ in pairs], [c for _, _, c in pairs],
                              statistic="mean_difference", seed=seed)
    return {"gain": ci.point, "ci": ci.as_list(), "steps": len(steps), "units": len({u for u, _, _ in pairs})}


def seed_gains(pairs: Sequence[tuple[dict, dict]], skip: int = 1, seed: int = 0) -> dict[str, Any]:
    """`gain_over_control` of several (run, control) pairs, each a seed of one method: every seed's gain with its
    own CI (units resampled), and the mean over seeds with the between-seed t interval, the seed being the unit
    (`metrics.seeds.seed_interval`; needs 2 or more seeds)."""
    per_seed = [gain_over_control(r, c, skip=skip, seed=seed) for r, c in pairs]
    between = seed_interval([g["gain"] for g in per_seed])
    return {"per_seed": per_seed, "gain": between.mean, "ci": between.as_list(), "df": between.df,
            "seeds": len(per_seed)}


POOL_INPUTS = "pool_inputs"  # the results.json field that lets a committed results.json stand for its folder


def pool_inputs(out: Path, reward: Callable[[dict], float]) -> dict[str, Any]:
    """What `--pool` needs of one seed, small enough to commit inside its results.json: both runs' (unit, reward)
    per step (the run's exam is read from the same file)."""
    return {which: {str(s): [[u, r] for u, r in rows] for s, rows in unit_rewards_by_step(out / which, reward).items()}
            for which in ("run", "control")}


def seed_units(path: Path, reward: Callable[[dict], float]) -> tuple[dict, dict]:
    """(run, control) unit rewards by step of one seed: a benchmark OUT folder (its trajectories), or a results.json
    that holds `pool_inputs` (a committed seed); ValueError naming what is missing."""
    path = Path(path)
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))[POOL_INPUTS]
            run, control = ({int(s): [(str(u), float(r)) for u, r in rows] for s, rows in saved[w].items()}
                            for w in ("run", "control"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: not a benchmark results.json with {POOL_INPUTS} ({exc!r})") from None
        return run, control
    missing = [w for w in ("run", "control") if not (path / w / "trajectories.jsonl").is_file()]
    if missing:
        raise ValueError(f"{path}: no {' or '.join(missing)} trajectories; --pool takes benchmark OUT folders or "
                         f"their results.json")
    return unit_rewards_by_step(path / "run", reward), unit_rewards_by_step(path / "control", reward)


def pool_report(out: Path, folders: Sequence[Path], reward: Callable[[dict], float],
                extra: Callable[[Sequence[Path]], dict[str, Any]] | None = None) -> dict[str, Any]:
    """`--pool`: earlier benchmark folders (each holding `run/` and `control/`) or their results.json files (with
    `pool_inputs`), one a seed, pooled with the seed as the unit (`seed_gains`), plus `extra(folders)` (the
    builder's exam), written to `out/pooled.json`; raises ValueError naming a seed that lacks either run, or with
    fewer than 2 seeds."""
    if len(folders) < 2:
        raise ValueError(f"pooling over seeds needs 2 or more benchmark folders, got {len(folders)}")
    pairs = [seed_units(Path(folder), reward) for folder in folders]
    Path(out).mkdir(parents=True, exist_ok=True)
    pooled = seed_gains(pairs)
    result = {"folders": [str(f) for f in folders], "seeds": len(folders),
              "gain_over_control": pooled["gain"], "gain_over_control_ci": pooled["ci"],
              "gain_over_control_per_seed": [{"folder": str(f), "gain": g["gain"], "ci": g["ci"]}
                                             for f, g in zip(folders, pooled["per_seed"], strict=True)],
              **(extra(folders) if extra is not None else {})}
    (Path(out) / "pooled.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def over_control_fields(run: dict[int, list[tuple[str, float]]],
                        control: dict[int, list[tuple[str, float]]]) -> dict[str, Any]:
    """`gain_over_control` as a learning benchmark's result fields (none for a run of one step)."""
    try:
        out = gain_over_control(run, control)
    except ValueError:
        return {}
    return {"gain_over_control": out["gain"], "gain_over_control_ci": out["ci"]}


def learning_verdict(gain_ci: Sequence[float], control_gain_ci: Sequence[float],
                     over_control_ci: Sequence[float] | None) -> str:
    """One plain sentence on whether a run learned, from its CIs: a within-run gain counts only when the lr=0
    control's gain is noise (its CI holds 0) and the run beats the control build by build (that CI above 0).

    With fresh corpora every step both runs see the same corpora in the same order, so a gain that the control
    shows too is the corpora getting easier, not learning."""
    def holds_zero(ci: Sequence[float]) -> bool:
        return ci[0] <= 0 <= ci[1]

    over = "no paired comparison" if over_control_ci is None else \
        f"gain over control CI [{over_control_ci[0]:+.3f}, {over_control_ci[1]:+.3f}]"
    if gain_ci[0] <= 0:
        return f"not shown: the within-run gain's CI [{gain_ci[0]:+.3f}, {gain_ci[1]:+.3f}] holds 0 or less; {over}"
    if not holds_zero(control_gain_ci):
        moved = "gains too" if control_gain_ci[0] > 0 else "falls"
        return (f"not shown: the lr=0 control {moved} (CI [{control_gain_ci[0]:+.3f}, {control_gain_ci[1]:+.3f}]), "
                f"so the ends differ without learning; {over}")
    if over_control_ci is None or over_control_ci[0] <= 0:
        return f"not shown: the run gains but does not beat the control build by build ({over})"
    return f"learns: the run gains, the control does not, and the run beats it ({over})"


def plot_learning(path: Path, run: list[float], control: list[float], valid: list[float], nonzero: list[float],
                  ylabel: str = "mean build reward") -> None:
    """Two panels: the run's and the control's reward per step; the run's valid-call rate and GRPO signal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(range(len(run)), run, marker="o", label="GRPO (run)")
    a.plot(range(len(control)), control, marker="s", label="learner.lr=0 (control)")
    a.set_xlabel("GRPO step")
    a.set_ylabel(ylabel)
    a.set_title(f"{ylabel} per step")
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


def bench_args(description: str, default_config: str, argv: list[str] | None = None) -> tuple[Any, Path, list[str]]:
    """A learning benchmark's command line: (args, the output folder (created), the overrides both runs share)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", default=default_config)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ends", type=int, default=ENDS,
                    help=f"steps at each end of the run that reward_gain compares (default {ENDS})")
    ap.add_argument("--concurrent", action="store_true",
                    help="run the run and the control at the same time, each in its own process (and Ray)")
    ap.add_argument("--only", choices=("run", "control"), help="run just one of the two (what --concurrent does)")
    ap.add_argument("--report", action="store_true",
                    help="run nothing: write results.json and the plot from the run and control folders in OUT")
    ap.add_argument("--pool", nargs="+", metavar="DIR",
                    help="run nothing: the gain over the control pooled over these earlier OUT folders (replicates), "
                         "written to OUT/pooled.json")
    ap.add_argument("overrides", nargs="*", help="key=value overrides for both runs")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return args, out, [f"steps={args.steps}", "checkpoint_every=0", *args.overrides]


def run_concurrently(script: str, args: Any, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a benchmark's `--only run` and `--only control` at the same time, each in its own process (and its own
    local Ray); returns the two runs' results.json. Raises SystemExit naming the folders if either fails."""
    base = [sys.executable, script, "--out", str(out), "--config", args.config, "--steps", str(args.steps)]
    procs = [subprocess.Popen([*base, "--only", which, *args.overrides]) for which in ("run", "control")]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"the run or the control failed (exit codes {codes}); see their folders under {out}")
    return read_results(out)


def read_results(out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The results.json of `out/run` and `out/control`."""
    run, control = (json.loads((Path(out) / which / "results.json").read_text(encoding="utf-8"))
                    for which in ("run", "control"))
    return run, control


def shared_warm_start(out: Path, overrides: Sequence[str]) -> list[str]:
    """The control's extra override: start from the warm start the run saved (OUT/run/checkpoints/sft: the same
    SFT, same seeds, data and settings) instead of repeating it; none when the overrides name one or the run
    saved none."""
    folder = out / "run" / "checkpoints" / "sft"
    if any(o.startswith("sft.init_from=") for o in overrides) or not (folder / "learner.json").is_file():
        return []
    return [f"sft.init_from={folder}"]
