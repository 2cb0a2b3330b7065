"""Outputs of a builder run: results.json, the console table, learning curves, the HTML report, MLflow artifacts."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("librarian.train_builder")


def write_outputs(out: Path, results: dict[str, Any], tracker: Any, title: str = "Librarian builder (GRPO)") -> None:
    """Write and log everything; prints the table and where the report and the MLflow run are."""
    from librarian.evaluation.plots import plot_learning_curves
    from librarian.evaluation.report import markdown_table, write_report

    plots: list[Path] = []
    history = results.get("history") or []
    if history:
        steps = [h["step"] for h in history]
        series = {k: (steps, [h.get(k, 0.0) for h in history]) for k in ("reward", "utility_gain", "final_utility")}
        plots.append(plot_learning_curves(series, out / "learning_curve.png", ylabel="per build", title="GRPO"))
        if all("loss" in h for h in history):
            plots.append(plot_learning_curves({"loss": (steps, [h["loss"] for h in history])}, out / "loss.png",
                                              ylabel="loss", title="learner loss"))
    rows = results.get("rows") or []
    if rows:
        table = markdown_table(rows)
        (out / "results.md").write_text(table + "\n", encoding="utf-8")
        print("\n" + table)
    report = write_report(out / "report.html", title, rows, plots,
                          notes=[f"{results.get('grpo_steps', 0)} GRPO steps; policy version "
                                 f"{results.get('policy_version')}; wall {results.get('wall_s', 0):.0f} s"],
                          extra={k: results[k] for k in ("sft", "exam", "rollout_failures") if k in results},
                          config=results.get("config"))
    results["report"] = str(report)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    for path in [out / "results.json", out / "config.yaml", report, *plots]:
        tracker.log_file(path)
    if (out / "trajectories.jsonl").is_file():
        tracker.log_file(out / "trajectories.jsonl", "trajectories")
    print(f"report: {report}")
    print(f"MLflow run {tracker.run_id} in {tracker.tracking_uri} (artifacts: {tracker.artifact_uri()})")
