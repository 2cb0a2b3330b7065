"""Outputs of a builder run: results.json, results.md and the console (what the run shows, then the tables),
learning curves, the HTML report, MLflow artifacts."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.builder_findings import pair_verdict, run_findings, store_name, unchanged_corpora
from librarian.evaluation.report import markdown_table, write_report
from librarian.pipelines.builder.curves import plot_curves

log = logging.getLogger("librarian.train_builder")

COLUMNS = (("name", "store"), ("n", "questions"), ("f1", "F1"), ("f1_ci", "F1 95% CI"), ("f1_delta", "F1 - flat"),
           ("f1_delta_ci", "F1 - flat 95% CI"), ("utility", "exam utility U"), ("utility_ci", "U 95% CI"),
           ("actions", "reader actions"), ("actions_ci", "reader actions 95% CI"), ("rho", "rho"),
           ("rho_ci", "rho 95% CI"), ("tokens_read", "tokens read"), ("files_read", "files read"),
           ("build_actions", "build actions"), ("construction_tokens", "build tokens"),
           ("same_as_flat", "corpora where store = flat"))
DIFFERENCE_COLUMNS = (("pair", "exam utility, a - b"), ("mean", "difference"), ("ci", "95% CI"), ("verdict", "verdict"))


def exam_rows(rows: Sequence[Mapping[str, Any]], exam: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The exam rows with each store's exam utility (and CI) and, for builders, on how many corpora the store is
    the flat store."""
    utilities = exam.get("utilities") or {}
    out = []
    for row in rows:
        u = utilities.get(row["name"]) or {}
        extra: dict[str, Any] = {"utility": u.get("mean"), "utility_ci": u.get("ci")}
        same, total = unchanged_corpora(exam, row["name"])
        if total:
            extra["same_as_flat"] = f"{same} of {total}"
        out.append({**row, **extra})
    return out


def difference_rows(exam: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per paired exam-utility difference, with its verdict."""
    out = []
    for pair, d in (exam.get("differences") or {}).items():
        a, b = pair.split("-", 1)
        out.append({"pair": f"{store_name(a)} - {store_name(b)}", "mean": d["mean"], "ci": d["ci"],
                    "verdict": pair_verdict(exam, pair, d["ci"])})
    return out


def results_markdown(findings: Sequence[str], rows: Sequence[Mapping[str, Any]],
                     differences: Sequence[Mapping[str, Any]]) -> str:
    """results.md: what the run shows, the exam table, the paired differences."""
    parts = ["## What this run shows", "", *(f"- {line}" for line in findings)]
    if rows:
        parts += ["", "## Exam", "", markdown_table(rows, COLUMNS)]
    if differences:
        parts += ["", "## Paired differences of exam utility", "",
                  markdown_table(differences, DIFFERENCE_COLUMNS, drop_zero=False)]
    return "\n".join(parts) + "\n"


def write_outputs(out: Path, results: dict[str, Any], tracker: Any, title: str = "Librarian builder (GRPO)") -> None:
    """Write and log everything; prints what the run shows, the tables, and where the report and MLflow run are."""
    history = results.get("history") or []
    plots = plot_curves(out, history, results.get("control"), seed=int((results.get("config") or {}).get("seed", 0)))
    exam = results.get("exam") or {}
    findings = run_findings(results)
    results["findings"] = findings
    rows = exam_rows(results.get("rows") or [], exam)
    differences = difference_rows(exam)
    text = results_markdown(findings, rows, differences)
    (out / "results.md").write_text(text, encoding="utf-8")
    print("\n" + text)
    notes = [f"{results.get('grpo_steps', 0)} GRPO steps; policy version {results.get('policy_version')}; "
             f"wall {results.get('wall_s', 0):.0f} s"]
    tables = [{"title": "Paired differences of exam utility", "columns": DIFFERENCE_COLUMNS, "rows": differences,
               "note": "Each difference pairs the two stores' answers question by question; a difference is named "
                       "only when its 95% CI excludes 0."}] if differences else []
    report = write_report(out / "report.html", title, rows, plots, notes=notes,
                          extra={k: results[k] for k in ("sft", "exam", "rollout_failures") if k in results},
                          config=results.get("config"), findings=findings, columns=COLUMNS, tables=tables)
    results["report"] = str(report)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    for path in [out / "results.json", out / "results.md", out / "config.yaml", report, *plots]:
        tracker.log_file(path)
    if (out / "trajectories.jsonl").is_file():
        tracker.log_file(out / "trajectories.jsonl", "trajectories")
    print(f"report: {report}")
    print(f"MLflow run {tracker.run_id} in {tracker.tracking_uri} (artifacts: {tracker.artifact_uri()})")

