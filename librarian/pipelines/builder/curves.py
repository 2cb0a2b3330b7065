"""A builder run's learning curves: `learning_curve.png` (reward, utility gain, final utility, one panel each, 95% CI
bands over the step's builds, the control when one is attached) and `loss.png` (steps without GRPO signal marked).

The per-build values come from `out_dir/trajectories.jsonl` (written when `save_trajectories` is on); without it
the panels show the step means from the history, without bands.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.metrics.bootstrap import bootstrap_ci
from librarian.evaluation.plots import StepSeries, history_series, plot_loss, plot_step_panels

QUANTITIES = {"reward": "build reward (sum over turns)", "utility_gain": "utility gain U(F_T) - U(F_0)",
              "final_utility": "final utility U(F_T)"}


def build_values(path: Path) -> dict[str, dict[int, list[float]]]:
    """Per quantity of `QUANTITIES`, step -> each build's value, from a trajectories.jsonl ({} when absent)."""
    if not path.is_file():
        return {}
    out: dict[str, dict[int, list[float]]] = {k: {} for k in QUANTITIES}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            step, final, initial = int(row["step"]), float(row["final_utility"]), float(row["initial_utility"])
            values = {"reward": sum(float(t["reward"]) for t in row["turns"]), "utility_gain": final - initial,
                      "final_utility": final}
            for key, value in values.items():
                out[key].setdefault(step, []).append(value)
    return out


def with_band(per_step: Mapping[int, Sequence[float]], seed: int = 0) -> StepSeries:
    """Step means with a bootstrap 95% CI over the step's builds (a one-build step has a zero-width band)."""
    steps = sorted(per_step)
    cis = [bootstrap_ci(per_step[s], n_boot=1000, seed=seed) for s in steps]
    return StepSeries(steps, [c.point for c in cis], [c.low for c in cis], [c.high for c in cis])


def plot_curves(out: Path, history: Sequence[Mapping[str, Any]], control: Mapping[str, Any] | None = None,
                seed: int = 0) -> list[Path]:
    """Write learning_curve.png and (when the learner reported a loss) loss.png under `out`; their paths."""
    if not history:
        return []
    values = build_values(out / "trajectories.jsonl")
    control_history = (control or {}).get("history") or []
    panels: dict[str, dict[str, StepSeries]] = {}
    for key, label in QUANTITIES.items():
        run = with_band(values[key], seed) if values.get(key) else history_series(history, key)
        if run is None:
            continue
        panels[label] = {"run": run}
        ctl = history_series(control_history, key)
        if ctl is not None:
            panels[label]["control (learner.lr=0)"] = ctl
    plots = []
    if panels:
        plots.append(plot_step_panels(panels, out / "learning_curve.png", title="GRPO: per build, means over the "
                                      "step's builds" + (" with 95% CIs" if values else "")))
    loss = plot_loss(history, out / "loss.png")
    return plots + ([loss] if loss is not None else [])
