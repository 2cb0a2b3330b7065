"""The researcher evaluation as a figure, a table and sentences: recall per arm with CIs, rounds and latency, and
what the paired differences against the full system show."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from librarian.evaluation.findings import difference, excludes_zero, interval
from librarian.evaluation.plots import PlotError
from librarian.evaluation.report import fmt

FULL = "hierarchical"  # the full system every ablation is compared with

TABLE = (("source_recall", "source recall"), ("source_recall_ci", "recall 95% CI"),
         ("source_precision", "precision"), ("answer_in_context", "answer in context"),
         ("client_score", "client score"), ("rounds_mean", "rounds (mean)"), ("rounds_median", "rounds (median)"),
         ("budget_exhausted", "budget exhausted"), ("query_latency_s_p50", "latency p50 (s)"),
         ("query_latency_s_p95", "latency p95 (s)"), ("construction_s", "construction (s)"), ("n", "n"))


def _arms(result: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    arms = result.get("arms")
    if not isinstance(arms, Mapping) or not arms:
        raise PlotError("result has no 'arms' (expected the output of evaluate_researcher)")
    for name, arm in arms.items():
        missing = [k for k in ("source_recall", "source_recall_ci", "rounds_mean", "query_latency_s_p50")
                   if k not in arm]
        if missing:
            raise PlotError(f"arm {name!r} lacks {', '.join(missing)}")
    return dict(arms)


def arms_table(result: Mapping[str, Any]) -> str:
    """One Markdown row per arm (columns without a value in any arm are left out), then the paired difference."""
    arms = _arms(result)
    cols = [(k, label) for k, label in TABLE if any(k in a for a in arms.values())]
    lines = ["| arm | " + " | ".join(label for _, label in cols) + " |", "|---|" + "---|" * len(cols)]
    lines += ["| " + name + " | " + " | ".join(fmt(a.get(k)) for k, _ in cols) + " |" for name, a in arms.items()]
    if "hierarchical_minus_flat" in result:
        lines.append("")
        lines.append(f"hierarchical - flat source recall: {fmt(result['hierarchical_minus_flat'])} "
                     f"(paired 95% CI {fmt(result['hierarchical_minus_flat_ci'])})")
    return "\n".join(lines)


def arm_findings(result: Mapping[str, Any]) -> list[str]:
    """What the arms show, in sentences from the paired differences against the full system: a headline
    'hierarchical vs flat' only when its CI excludes 0, ablations that beat the full system said so, latency
    differences in the same way."""
    arms = _arms(result)
    diffs = result.get("differences") or {}
    if FULL not in arms:
        return [f"The full system ({FULL}) was not among the arms, so no arm is compared with it."]
    out = []
    if FULL in arms:
        full = arms[FULL]
        out.append(f"Full system ({FULL}): source recall {full['source_recall']:.3f} (95% CI "
                   f"{interval(full['source_recall_ci'], signed=False)}) on {full.get('n', '?')} questions.")
    if result.get("hierarchical_minus_flat_ci") is not None:
        point, ci = result["hierarchical_minus_flat"], result["hierarchical_minus_flat_ci"]
        if excludes_zero(ci):
            better = FULL if point > 0 else "flat"
            out.append(f"{better} beats {'flat' if better == FULL else FULL} on source recall: {FULL} - flat "
                       f"{point:+.3f} (paired 95% CI {interval(ci)}).")
        else:
            out.append(f"{FULL} vs flat: no difference shown in source recall ({FULL} - flat {point:+.3f}, paired "
                       f"95% CI {interval(ci)} contains 0).")
    for arm, d in diffs.items():
        if arm != "flat":
            ci = d["source_recall_ci"]
            if ci[0] > 0:
                out.append(f"The ablation {arm} beats the full system on source recall: {arm} - {FULL} "
                           f"{d['source_recall']:+.3f} (paired 95% CI {interval(ci)}).")
            else:
                out.append(difference("Source recall", arm, FULL, d["source_recall"], ci))
    for arm, d in diffs.items():
        if "latency_s" in d:
            out.append(difference("Query latency (s)", arm, FULL, d["latency_s"], d["latency_s_ci"], "slower", "faster"))
    return out


def arms_markdown(result: Mapping[str, Any]) -> str:
    """arms.md: what the arms show (`arm_findings`), then the table."""
    return "\n".join(["## What the arms show", "", *(f"- {f}" for f in arm_findings(result)), "",
                      arms_table(result)]) + "\n"


def plot_arms(result: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    """Left: source recall per arm with 95% CI bars; right: mean rounds and p50 latency per arm. Written atomically."""
    arms = _arms(result)
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise PlotError(f"{target}: plots are written as .png files")
    names = list(arms)
    x = range(len(names))
    recall = [float(arms[n]["source_recall"]) for n in names]
    low = [max(0.0, r - float(arms[n]["source_recall_ci"][0])) for r, n in zip(recall, names, strict=True)]
    high = [max(0.0, float(arms[n]["source_recall_ci"][1]) - r) for r, n in zip(recall, names, strict=True)]
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    ax.bar(x, recall, yerr=[low, high], capsize=4, color="tab:blue")
    ax.set_xticks(list(x), names, rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("source recall (95% CI)")
    ax.set_title(title or "source recall per arm")
    ax2 = fig.add_subplot(1, 2, 2)
    width = 0.4
    ax2.bar([i - width / 2 for i in x], [float(arms[n]["rounds_mean"]) for n in names], width, label="rounds (mean)",
            color="tab:orange")
    ax2.set_ylabel("rounds per query")
    ax2.set_xticks(list(x), names, rotation=20)
    ax3 = ax2.twinx()
    ax3.bar([i + width / 2 for i in x], [1000 * float(arms[n]["query_latency_s_p50"]) for n in names], width,
            label="latency p50 (ms)", color="tab:green")
    ax3.set_ylabel("query latency p50 (ms)")
    ax2.set_title("rounds and latency")
    for axis in (ax2, ax3):  # head room for the legend
        axis.set_ylim(0, 1.3 * max([b.get_height() for b in axis.patches] + [1e-9]))
    handles = ax2.get_legend_handles_labels()[0] + ax3.get_legend_handles_labels()[0]
    ax2.legend(handles, ["rounds (mean)", "latency p50 (ms)"], loc="upper center", ncol=2, fontsize=8)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".plot-", suffix=".png", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
