"""The evaluation report: one self-contained HTML page (tables, plots inlined as PNG data URIs, config).

The page is a jinja2 template (`templates/report.html.j2`) with autoescaping on,
so a store name, note or config value is always shown as text, never as markup.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2

from librarian.evaluation.metrics.amortization import AmortizationCurve, crossover
from librarian.evaluation.metrics.bootstrap import CI
from librarian.evaluation.metrics.gradient import QueryResult, gradient_table
from librarian.evaluation.plots import (
    RhoPoint,
    plot_amortization,
    plot_gradient,
    plot_rho_vs_coverage,
    plot_structure,
)

COLUMNS = (("name", "store"), ("n", "n"), ("f1", "F1"), ("f1_ci", "F1 95% CI"), ("actions", "mean actions"),
           ("actions_ci", "actions 95% CI"), ("rho", "rho"), ("rho_ci", "rho 95% CI"),
           ("tokens_read", "tokens read"), ("files_read", "files read"), ("coverage_one_hop", "coverage (1 hop)"),
           ("question_coverage", "question coverage"), ("ops", "ops"), ("construction_tokens", "build tokens"))


def fmt(value: Any) -> str:
    """A table cell: floats to 3 places, intervals as [low, high], None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    return str(value)


Columns = Sequence[tuple[str, str]]


def shown_columns(rows: Sequence[Mapping[str, Any]], columns: Columns = COLUMNS,
                  drop_zero: bool = True) -> tuple[list[tuple[str, str]], str]:
    """The columns worth showing and a sentence naming those left out: a column no row has a value for, or
    one that is 0 in every row, says nothing about any store ('' when every column is shown). A `<key>_ci`
    column goes with a `<key>` column left out for being 0. `drop_zero=False` keeps columns of zeros (a table of
    differences, where 0 is a finding)."""
    kept, empty, zero = [], [], []
    for key, label in columns:
        values = [r.get(key) for r in rows if r.get(key) is not None]
        if key.endswith("_ci") and key[:-3] in zero:
            continue  # the interval of a figure that is 0 for every store goes with it
        if key != "name" and not values:
            empty.append(label)
        elif drop_zero and key != "name" and all(isinstance(v, int | float) and not isinstance(v, bool) and v == 0
                                                 for v in values):
            zero.append(key)
        else:
            kept.append((key, label))
    labels = dict(columns)
    zero = [labels[k] for k in zero]
    parts = ([f"0 for every store: {', '.join(zero)}"] if zero else []) + (
        [f"not measured for any store: {', '.join(empty)}"] if empty else [])
    return kept, ("Columns left out (" + "; ".join(parts) + ").") if parts else ""


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Columns = COLUMNS, drop_zero: bool = True) -> str:
    """The results table as Markdown (results.md, the console); columns left out are named below it."""
    cols, left_out = shown_columns(rows, columns, drop_zero)
    head = "| " + " | ".join(label for _, label in cols) + " |"
    rule = "|" + "---|" * len(cols)
    body = ["| " + " | ".join(fmt(r.get(k)) for k, _ in cols) + " |" for r in rows]
    return "\n".join([head, rule, *body, *([""] + [left_out] if left_out else [])])


@functools.cache
def _environment() -> Any:
    env = jinja2.Environment(loader=jinja2.PackageLoader("librarian.evaluation", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["fmt"] = fmt
    env.filters["pretty"] = lambda value: json.dumps(value, indent=1, default=str)
    return env


def render_report(title: str, rows: Sequence[Mapping[str, Any]], plots: Sequence[str | Path],
                  notes: Sequence[str] = (), extra: Mapping[str, Any] | None = None,
                  config: Mapping[str, Any] | None = None, *, findings: Sequence[str] = (),
                  columns: Columns = COLUMNS, tables: Sequence[Mapping[str, Any]] = ()) -> str:
    """The report page; a plot that does not exist is named as missing rather than failing the page.

    `findings` (sentences: what the run shows and cannot show) open the page; `tables` are further tables,
    each {"title", "columns", "rows", "note"?}, shown after the main one (their columns of zeros kept)."""
    figures = []
    for p in map(Path, plots):
        data = base64.b64encode(p.read_bytes()).decode("ascii") if p.is_file() else ""
        figures.append({"name": p.name, "stem": p.stem, "data": data})
    cols, left_out = shown_columns(rows, columns)
    more = [{"title": t["title"], "columns": shown_columns(t["rows"], t["columns"], drop_zero=False)[0],
             "rows": list(t["rows"]), "note": t.get("note", "")} for t in tables]
    return _environment().get_template("report.html.j2").render(
        title=title, columns=cols, rows=list(rows), notes=[*([left_out] if left_out else []), *notes],
        plots=figures, extra=extra or {}, config=config or {}, findings=list(findings), tables=more)


def write_report(path: str | Path, title: str, rows: Sequence[Mapping[str, Any]], plots: Sequence[str | Path],
                 notes: Sequence[str] = (), extra: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None, **sections: Any) -> Path:
    """Write the report page to `path` (its folder is created); `sections` as `render_report` takes them."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(title, rows, plots, notes, extra, config, **sections), encoding="utf-8")
    return out


def plot_all(out: Path, rows: Sequence[Mapping[str, Any]], exams: Mapping[str, Sequence[Any]],
             gradient_exams: Mapping[str, Sequence[Any]], groups: Mapping[str, Sequence[Any]],
             structure: Mapping[str, Any], n_boot: int = 2000, seed: int = 0) -> tuple[list[Path], dict[str, Any]]:
    """The evaluation's plots (PNG under `out`) and the figures behind them (gradient rows, curves)."""
    plots: list[Path] = []
    extra: dict[str, Any] = {}
    points = [RhoPoint(r["name"], r["coverage_one_hop"], r["rho"], CI(r["rho"], *r["rho_ci"])) for r in rows
              if r.get("rho") is not None]  # rho is not reported below the F1 floor
    if points:
        plots.append(plot_rho_vs_coverage(points, out / "rho_vs_coverage.png"))
    curves = [AmortizationCurve(r["name"], float(r["construction_tokens"]), float(r["tokens_read"]),
                                min(1.0, max(r["f1"], 1e-3))) for r in rows]
    plots.append(plot_amortization(curves, out / "amortization.png"))
    extra["amortization"] = {c.name: {"build_tokens": c.build, "answer_tokens": c.answer, "accuracy": c.accuracy,
                                      "crossover_with_flat": crossover(c, curves[0], normalized=True)}
                             for c in curves}
    if groups and all(gradient_exams.get(name) for name in exams):
        ids = {g: [q.id for q in qs] for g, qs in groups.items() if qs}
        as_query = {name: {r.qid: QueryResult(r.f1, r.actions, r.exhausted) for r in res}
                    for name, res in gradient_exams.items()}
        tables = {name: gradient_table(ids, as_query[name], as_query["flat"], n_boot=n_boot, seed=seed)
                  for name in gradient_exams if name != "flat"}
        if tables:
            plots.append(plot_gradient(tables, out / "gradient.png"))
            extra["gradient"] = {name: [{"group": r.group, "n": r.n, "rho": r.rho.point, "rho_ci": r.rho.as_list(),
                                         "f1": r.f1, "f1_flat": r.f1_flat, "actions": r.actions,
                                         "actions_flat": r.actions_flat, "significant": r.significant}
                                        for r in rows_] for name, rows_ in tables.items()}
    plots.append(plot_structure(dict(structure), out / "structure.png"))
    return plots, extra
