"""A sweep's figures: the metrics of each cell (`cells.cell_metrics`), seed groups with bootstrap CIs, table
and plot, and each cell's MLflow child run.

Cells that differ only by seed form a group whose CI is a bootstrap over the
seeds' values.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.metrics.bootstrap import bootstrap_ci
from librarian.pipelines.ablate.cells import cell_tags


def metric_names(cells: Sequence[Mapping[str, Any]], paths: Sequence[str]) -> list[str]:
    """The metrics to compare: the configured paths, else every metric some cell has (first-seen order)."""
    if paths:
        return list(paths)
    names: list[str] = []
    for c in cells:
        for k in c.get("metrics", {}):
            if not k.endswith("_ci") and k not in names:
                names.append(k)
    return names


def groups(cells: Sequence[Mapping[str, Any]], names: Sequence[str], n_boot: int = 2000, seed: int = 0
           ) -> list[dict[str, Any]]:
    """Seed groups (two or more cells with metrics sharing a `group`): mean and bootstrap CI over the seeds."""
    by: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        if c.get("metrics"):
            by.setdefault(c["group"], []).append(c)
    out = []
    for label, members in by.items():
        if len(members) < 2:
            continue
        row: dict[str, Any] = {"name": label, "cells": [m["name"] for m in members], "n": len(members),
                               "metrics": {}}
        for name in names:
            values = [m["metrics"][name] for m in members if name in m["metrics"]]
            if len(values) >= 2:
                ci = bootstrap_ci(values, n_boot=n_boot, seed=seed)
                row["metrics"][name] = ci.point
                row["metrics"][name + "_ci"] = ci.as_list()
            elif values:
                row["metrics"][name] = values[0]
        out.append(row)
    return out


def _fmt(metrics: Mapping[str, Any], name: str) -> str:
    if name not in metrics:
        return "-"
    text = f"{metrics[name]:.4g}"
    ci = metrics.get(name + "_ci")
    return f"{text} [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else text


def summary_table(cells: Sequence[Mapping[str, Any]], grouped: Sequence[Mapping[str, Any]],
                  names: Sequence[str]) -> str:
    """Markdown: one row per cell (status, attempts, wall time, metrics with CIs), then one per seed group."""
    head = "| cell | status | attempts | wall s | " + " | ".join(names) + " |"
    rule = "|" + "---|" * (4 + len(names))
    rows = [f"| {c['name']} | {c['status']} | {c.get('attempts', 0)} | {c.get('wall_s', 0.0):.1f} | "
            + " | ".join(_fmt(c.get("metrics", {}), n) for n in names) + " |" for c in cells]
    lines = [head, rule, *rows]
    if grouped:
        lines += ["", "Seed groups (mean over seeds, bootstrap 95% CI):", "",
                  "| group | seeds | " + " | ".join(names) + " |", "|" + "---|" * (2 + len(names))]
        lines += [f"| {g['name']} | {g['n']} | " + " | ".join(_fmt(g["metrics"], n) for n in names) + " |"
                  for g in grouped]
    failed = [c for c in cells if c["status"] == "failed"]
    if failed:
        lines += ["", "Failed cells:", ""] + [f"- {c['name']}: {c.get('error', '')}" for c in failed]
    stopped = [c["name"] for c in cells if c["status"] == "early_stopped"]
    if stopped:
        lines += ["", f"Stopped early by the scheduler: {', '.join(stopped)}"]
    return "\n".join(lines)


def plot(cells: Sequence[Mapping[str, Any]], grouped: Sequence[Mapping[str, Any]], names: Sequence[str],
         path: str | Path, title: str = "") -> Path | None:
    """Bars per metric: seed groups (with their CI) and ungrouped cells (with their results' CI, if any)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    in_group = {n for g in grouped for n in g["cells"]}
    series = [(g["name"] + f" (n={g['n']})", g["metrics"]) for g in grouped]
    series += [(c["name"], c.get("metrics", {})) for c in cells if c["name"] not in in_group]
    names = [n for n in names if any(n in m for _, m in series)]
    if not names or not series:
        return None
    fig, axes = plt.subplots(len(names), 1, figsize=(max(6.0, 0.9 * len(series) + 2), 2.2 * len(names) + 1.2),
                             squeeze=False, sharex=True)
    for ax, name in zip(axes[:, 0], names, strict=True):
        xs, ys, lo, hi = [], [], [], []
        for i, (_, m) in enumerate(series):
            if name not in m:
                continue
            y = m[name]
            ci = m.get(name + "_ci") or [y, y]
            xs.append(i)
            ys.append(y)
            lo.append(max(0.0, y - ci[0]))
            hi.append(max(0.0, ci[1] - y))
        ax.bar(xs, ys, yerr=[lo, hi], capsize=4, color="tab:blue", alpha=0.8)
        ax.set_ylabel(name, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    bottom = axes[-1, 0]
    bottom.set_xticks(range(len(series)))
    bottom.set_xticklabels([label for label, _ in series], rotation=30, ha="right", fontsize=8)
    axes[0, 0].set_title(title or "sweep (error bars: 95% CI where known)", fontsize=10)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.stem + ".tmp" + target.suffix)
    fig.savefig(tmp, dpi=100, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(target)
    return target


def mlflow_key(name: str) -> str:
    """A metric path as an MLflow metric name (alphanumerics, _ - . space : / only)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)[:250]


class ChildRuns:
    """The MLflow children of the sweep's run: find a cell's own run, add the sweep's metrics, or make one."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.client = tracker.client

    def find(self, name: str) -> list[Any]:
        flt = f"tags.`mlflow.parentRunId` = '{self.tracker.run_id}' and tags.`librarian.cell` = '{name}'"
        runs = self.client.search_runs([self.tracker.experiment_id], flt, max_results=50)
        return sorted(runs, key=lambda r: r.info.start_time)

    def record(self, cell: Mapping[str, Any]) -> str:
        """Log the cell's metrics to its latest run (a driver-made run when the pipeline made none)."""
        from mlflow.entities import Metric, Param

        runs = self.find(cell["name"])
        for earlier in runs[:-1]:  # a retried cell's attempts that died with their run open
            if earlier.info.status == "RUNNING":
                self.client.set_terminated(earlier.info.run_id, "FAILED")
        if runs:
            run_id = runs[-1].info.run_id
            if cell["status"] == "early_stopped":
                self.client.set_terminated(run_id, "KILLED")
        else:  # the pipeline logs nowhere (or failed before its Tracker started)
            tags = {"mlflow.parentRunId": self.tracker.run_id, **cell_tags(cell["name"], cell["overrides"]),
                    "librarian.driver_run": "true"}
            run_id = self.client.create_run(self.tracker.experiment_id, run_name=cell["name"], tags=tags).info.run_id
            params = [Param(k[:250], json.dumps(v)[:6000]) for k, v in cell["overrides"].items()]
            if params:
                self.client.log_batch(run_id, params=params)
            self.client.set_terminated(run_id, {"failed": "FAILED", "early_stopped": "KILLED"}.get(cell["status"],
                                                                                                   "FINISHED"))
        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(f"sweep.{k}"), float(v), now, 0) for k, v in cell["metrics"].items()
                   if not k.endswith("_ci")]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)
        self.client.set_tag(run_id, "librarian.status", cell["status"])
        return run_id
