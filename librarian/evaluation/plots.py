"""Plots a person would rather see than read, as PNG files (matplotlib's Agg canvas, no pyplot state).

Learning curves (one quantity per panel, CI bands, integer steps), rho against coverage, amortization curves with their
crossover, the key-coverage gradient, and structure statistics. Each function
validates its input first (raising `PlotError` naming what was wrong),
writes one PNG and returns its path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from librarian.evaluation.findings import no_signal_steps
from librarian.evaluation.metrics.amortization import AmortizationCurve, crossover
from librarian.evaluation.metrics.bootstrap import CI
from librarian.evaluation.metrics.gradient import GradientRow
from librarian.evaluation.metrics.structure import HEADLINE
from librarian.evaluation.transfer import STORES as TRANSFER_STORES
from librarian.workspace.stats import StructureStats


class PlotError(ValueError):
    """Bad input to a plot; the message names it."""


@dataclass(frozen=True, slots=True)
class StepSeries:
    """One quantity of an RL run per step: the mean, and optionally a 95% CI band (`low`, `high`)."""

    steps: Sequence[int]
    mean: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None


def history_series(history: Sequence[Mapping[str, float]], key: str) -> StepSeries | None:
    """A quantity's step means from an RL run's history (rows with `step`), no band; None when no step has it."""
    points = [(int(h["step"]), float(h[key])) for h in history if key in h]
    return StepSeries([p[0] for p in points], [p[1] for p in points]) if points else None


@dataclass(frozen=True, slots=True)
class RhoPoint:
    """One store on the rho-vs-coverage plot: coverage as a share in [0, 1], rho, optional CI."""

    name: str
    coverage: float
    rho: float
    ci: CI | None = None


def _target(path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise PlotError(f"{p}: plots are written as .png files")
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def _finite(what: str, values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise PlotError(f"{what}: expected a non-empty list of numbers")
    if not np.all(np.isfinite(arr)):
        raise PlotError(f"{what}: contains NaN or infinite values")
    return arr


def _figure(figsize: tuple[float, float]) -> Any:
    """A matplotlib Figure (matplotlib loads with the first plot, not with this module)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def _save(fig: Any, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    return path


def ema(values: np.ndarray, alpha: float) -> np.ndarray:
    """Exponential moving average with weight `alpha` on the newest value."""
    out = np.empty_like(values)
    acc = values[0]
    for i, v in enumerate(values):
        acc = alpha * v + (1 - alpha) * acc
        out[i] = acc
    return out


def plot_learning_curves(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: str | Path, *,
                         ylabel: str = "reward", xlabel: str = "step", smoothing: float | None = None,
                         title: str = "") -> Path:
    """One line per named (steps, values) series; with `smoothing` in (0, 1], an EMA over the raw values."""
    out = _target(path)
    if not series:
        raise PlotError("plot_learning_curves: no series given")
    if smoothing is not None and not 0 < smoothing <= 1:
        raise PlotError(f"smoothing must be in (0, 1] (got {smoothing})")
    fig = _figure((6.4, 4.0))
    ax = fig.add_subplot()
    for name, pair in series.items():
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise PlotError(f"series {name!r}: expected a (steps, values) pair")
        x, y = _finite(f"series {name!r} steps", pair[0]), _finite(f"series {name!r} values", pair[1])
        if x.size != y.size:
            raise PlotError(f"series {name!r}: {x.size} steps but {y.size} values")
        if smoothing is not None:
            line = ax.plot(x, y, alpha=0.3, linewidth=1)[0]
            ax.plot(x, ema(y, smoothing), color=line.get_color(), label=name)
        else:
            ax.plot(x, y, marker="o" if x.size < 30 else None, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title or f"{ylabel} over {xlabel}s")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, out)


def plot_step_panels(panels: Mapping[str, Mapping[str, StepSeries]], path: str | Path, *, title: str = "",
                     marks: Mapping[int, str] | None = None, xlabel: str = "GRPO step") -> Path:
    """One panel per quantity (its name is the y label), one line per series (e.g. run and control) with its CI
    band; integer step ticks; `marks` shades steps and names why (e.g. no GRPO signal)."""
    out = _target(path)
    if not panels:
        raise PlotError("plot_step_panels: no panels given")
    from matplotlib import ticker

    fig = _figure((max(6.4, 4.2 * len(panels)), 3.8))
    for i, (quantity, series) in enumerate(panels.items()):
        if not series:
            raise PlotError(f"panel {quantity!r}: no series given")
        ax = fig.add_subplot(1, len(panels), i + 1)
        for name, s in series.items():
            x, y = _finite(f"{quantity} {name!r} steps", s.steps), _finite(f"{quantity} {name!r} values", s.mean)
            if x.size != y.size:
                raise PlotError(f"{quantity} {name!r}: {x.size} steps but {y.size} values")
            line = ax.plot(x, y, marker="o", label=name)[0]
            if s.low is not None and s.high is not None:
                low, high = _finite(f"{quantity} {name!r} CI", s.low), _finite(f"{quantity} {name!r} CI", s.high)
                if low.size != x.size or high.size != x.size:
                    raise PlotError(f"{quantity} {name!r}: the CI band needs one low and one high per step")
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, label=f"{name} 95% CI")
        for step, why in (marks or {}).items():
            ax.axvspan(step - 0.4, step + 0.4, color="grey", alpha=0.15)
            ax.annotate(why, (step, 0.98), xycoords=("data", "axes fraction"), ha="center", va="top", fontsize=7,
                        rotation=90)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(quantity)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, out)


def plot_loss(history: Sequence[Mapping[str, float]], path: str | Path, samples: str = "builds") -> Path | None:
    """An RL run's learner loss per step, the steps where no group's `samples` differed in reward shaded (their
    loss is 0 by construction); None when the history has no loss (e.g. a `learner.lr=0` control)."""
    loss = history_series(history, "loss")
    if loss is None:
        return None
    marks = {s: "no signal: loss 0" for s in no_signal_steps(history) if s in set(loss.steps)}
    title = "learner loss" + (f" (shaded: no group's {samples} differed in reward, so the loss is 0 by construction)"
                              if marks else "")
    return plot_step_panels({"learner loss": {"run": loss}}, path, marks=marks, title=title)


def plot_rho_vs_coverage(points: Sequence[RhoPoint], path: str | Path, *, title: str = "") -> Path:
    """Each store at (coverage %, rho) with its CI; the flat store's rho = 1 as a dashed line."""
    out = _target(path)
    if not points:
        raise PlotError("plot_rho_vs_coverage: no points given")
    fig = _figure((6.4, 4.4))
    ax = fig.add_subplot()
    for p in points:
        if not (0.0 <= p.coverage <= 1.0) or not math.isfinite(p.rho) or p.rho < 0:
            raise PlotError(f"point {p.name!r}: coverage must be a share in [0, 1] and rho a number >= 0 "
                            f"(got coverage {p.coverage}, rho {p.rho})")
        yerr = None
        if p.ci is not None:
            yerr = [[max(p.rho - p.ci.low, 0.0)], [max(p.ci.high - p.rho, 0.0)]]
        ax.errorbar([p.coverage * 100], [p.rho], yerr=yerr, fmt="o", capsize=4, label=p.name)
        ax.annotate(p.name, (p.coverage * 100, p.rho), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.axhline(1.0, linestyle="--", color="grey", linewidth=1)
    ax.set_xlabel("corpus coverage (%)")
    ax.set_ylabel("rho: actions relative to the flat store")
    ax.set_title(title or "rho against coverage (lower is cheaper)")
    ax.set_xlim(-3, 103)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out)


def plot_amortization(curves: Sequence[AmortizationCurve], path: str | Path, *, q_max: int = 60,
                      title: str = "") -> Path:
    """Tokens per query and per expected correct answer against questions per corpus, crossovers marked."""
    out = _target(path)
    if len(curves) < 1:
        raise PlotError("plot_amortization: no curves given")
    names = [c.name for c in curves]
    if len(set(names)) != len(names):
        raise PlotError(f"plot_amortization: curve names repeat: {names}")
    if not isinstance(q_max, int) or q_max < 2:
        raise PlotError(f"q_max must be an integer >= 2 (got {q_max!r})")
    q = np.linspace(1, q_max, 200)
    fig = _figure((11, 4.2))
    for i, normalized in enumerate((False, True)):
        ax = fig.add_subplot(1, 2, i + 1)
        for c in curves:
            ax.plot(q, c.tokens_per_correct(q) if normalized else c.tokens_per_query(q), label=c.name)
        for a, b in combinations(curves, 2):
            x = crossover(a, b, normalized)
            if x is not None and x <= q_max:
                y = a.tokens_per_correct(x) if normalized else a.tokens_per_query(x)
                ax.plot([x], [y], "kx", markersize=8)
                ax.annotate(f"{a.name}={b.name} at q={x:.1f}", (x, y), textcoords="offset points",
                            xytext=(6, 8), fontsize=8)
        ax.set_xlabel("questions per corpus q")
        ax.set_ylabel("tokens per expected correct answer" if normalized else "tokens per query")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(title or "amortization: T(q) = B/q + A")
    return _save(fig, out)


def plot_gradient(tables: Mapping[str, Sequence[GradientRow]], path: str | Path, *, title: str = "") -> Path:
    """rho (with CI) and F1 per coverage group, one bar series per store."""
    out = _target(path)
    if not tables:
        raise PlotError("plot_gradient: no stores given")
    groups: list[str] = []
    for store, rows in tables.items():
        if not rows:
            raise PlotError(f"plot_gradient: store {store!r} has no rows")
        groups += [r.group for r in rows if r.group not in groups]
    fig = _figure((11, 4.2))
    ax_rho, ax_f1 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    width = 0.8 / len(tables)
    x = np.arange(len(groups))
    for i, (store, rows) in enumerate(tables.items()):
        by = {r.group: r for r in rows}
        pos = x[[groups.index(g) for g in by]] + (i - (len(tables) - 1) / 2) * width
        rhos = np.array([r.rho.point for r in by.values()])
        err = np.array([[max(r.rho.point - r.rho.low, 0) for r in by.values()],
                        [max(r.rho.high - r.rho.point, 0) for r in by.values()]])
        ax_rho.bar(pos, rhos, width, yerr=err, capsize=3, label=store)
        for p, r in zip(pos, by.values(), strict=True):
            if r.significant:
                ax_rho.annotate("*", (p, r.rho.high), ha="center", fontsize=12)
        ax_f1.bar(pos, [r.f1 for r in by.values()], width, label=store)
    ax_rho.axhline(1.0, linestyle="--", color="grey", linewidth=1)
    for ax, label in ((ax_rho, "rho (actions / flat store)"), (ax_f1, "F1")):
        ax.set_xticks(x, groups)
        ax.set_xlabel("coverage group")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle(title or "key-coverage gradient (* : CI on rho excludes 1)")
    return _save(fig, out)


def plot_structure(stats: Mapping[str, StructureStats], path: str | Path, *, title: str = "") -> Path:
    """The headline structure statistics per store, plus the index out-degree distribution."""
    out = _target(path)
    if not stats:
        raise PlotError("plot_structure: no stores given")
    for name, s in stats.items():
        if not isinstance(s, StructureStats):
            raise PlotError(f"plot_structure: store {name!r} is a {type(s).__name__}, expected StructureStats")
    fields = list(HEADLINE)
    cols = 4
    rows = math.ceil((len(fields) + 1) / cols)
    fig = _figure((3.2 * cols, 2.8 * rows))
    names = list(stats)
    for i, f in enumerate(fields):
        ax = fig.add_subplot(rows, cols, i + 1)
        heights = [float(getattr(stats[n], f)) for n in names]
        ax.bar(range(len(names)), heights, color="tab:blue")
        ax.set_ylim(0, max(heights) * 1.1 if max(heights) > 0 else 1.0)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(HEADLINE[f], fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    ax = fig.add_subplot(rows, cols, len(fields) + 1)
    for n in names:
        degrees = stats[n].index_out_degrees
        if degrees:
            ax.hist(degrees, bins=min(20, max(degrees)), alpha=0.5, label=n)
    ax.set_title("index out-degree", fontsize=9)
    if any(stats[n].index_out_degrees for n in names):
        ax.legend(fontsize=7)
    fig.suptitle(title or "structure statistics")
    return _save(fig, out)


def plot_pooled_exam(pooled: Mapping[str, Any], path: str | Path, *, title: str = "") -> Path:
    """Solve rates on the hard exam corpora, pooled over seeds: per mode (sampled, greedy) a bar per store at the
    mean over seeds with the between-seed interval, and each seed's rate as a dot (`evaluation.transfer` fields)."""
    out = _target(path)
    seeds = pooled.get("per_seed") or []
    if not seeds:
        raise PlotError("plot_pooled_exam: no seeds in the pooled figures (`per_seed` is empty)")
    fig = _figure((9.0, 3.4))
    for i, mode in enumerate(("sampled", "greedy")):
        ax = fig.add_subplot(1, 2, i + 1)
        names = [s for s in TRANSFER_STORES if f"exam_solve_rate_{s}_{mode}" in pooled]
        means = [float(pooled[f"exam_solve_rate_{s}_{mode}"]) for s in names]
        cis = [pooled[f"exam_solve_rate_{s}_{mode}_ci"] for s in names]
        err = np.array([[m - lo for m, (lo, _) in zip(means, cis, strict=True)],
                        [hi - m for m, (_, hi) in zip(means, cis, strict=True)]]).clip(min=0)
        ax.bar(range(len(names)), means, yerr=err, capsize=4, color="tab:blue", alpha=0.6)
        for j, s in enumerate(names):
            dots = [float(seed[f"exam_solve_rate_{s}_{mode}"]) for seed in seeds
                    if f"exam_solve_rate_{s}_{mode}" in seed]
            ax.plot([j] * len(dots), dots, "o", color="black", markersize=4)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{mode} builds", fontsize=9)
        ax.set_ylabel("solve rate (hard corpora)", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(title or f"held-out exam over {len(seeds)} seeds (bar: mean, whisker: between-seed CI, dot: a seed)",
                 fontsize=9)
    return _save(fig, out)
