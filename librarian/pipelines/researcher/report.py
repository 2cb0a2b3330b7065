"""Outputs of a researcher run: results.json, the arms table, the reward curve and arms plot, MLflow artifacts.

Every file is written to a temporary name in the output folder and renamed
into place, so a crash never leaves a half-written results.json.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from librarian.evaluation.memory_report import arms_table, plot_arms
from librarian.evaluation.plots import history_series, plot_loss, plot_step_panels

TRAINED = "trained (hierarchical)"


def write_atomic(path: Path, text: str) -> Path:
    """`text` to `path` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


CURVES = {"reward": "reward (source recall)", "reward_full_recall": "share with full recall",
          "budget_exhausted": "share forced to finalize"}


def plot_curves(out: Path, history: list[dict[str, Any]]) -> list[Path]:
    """reward_curve.png (one panel per quantity, integer steps) and loss.png (steps without GRPO signal shaded)."""
    panels = {label: {"run": s} for key, label in CURVES.items() if (s := history_series(history, key)) is not None}
    files = [plot_step_panels(panels, out / "reward_curve.png", title="hint-guided GRPO, per trajectory: means "
                              "over the step's trajectories")] if panels else []
    loss = plot_loss(history, out / "loss.png", samples="trajectories")
    files += [loss] if loss is not None else []
    return files


def write_outputs(out: Path, results: dict[str, Any], evaluation: dict[str, Any], tracker: Any) -> list[Path]:
    """Write and log results.json, evaluation.json, results.md and the plots; prints the table."""
    history = results.get("history") or []
    files = plot_curves(out, history)
    if evaluation.get("arms"):
        shown = {**evaluation, "arms": dict(evaluation["arms"])}
        if results.get("trained"):
            shown["arms"][TRAINED] = results["trained"]
        files.append(plot_arms(shown, out / "arms.png", title="source recall per arm (test questions)"))
        table = arms_table(shown)
        files.append(write_atomic(out / "results.md", table + "\n"))
        files.append(write_atomic(out / "evaluation.json", json.dumps(evaluation, indent=2, default=str) + "\n"))
        print("\n" + table)
    files.append(write_atomic(out / "results.json", json.dumps(results, indent=2, default=str) + "\n"))
    for path in [*files, out / "config.yaml"]:
        tracker.log_file(path)
    if (out / "trajectories.jsonl").is_file():
        tracker.log_file(out / "trajectories.jsonl", "trajectories")
    print(f"MLflow run {tracker.run_id} in {tracker.tracking_uri} (artifacts: {tracker.artifact_uri()})")
    return files
