"""What `train_curator` shows a person: the learning-curve plot and the results table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def rolling(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over up to `window` values (same length as `values`)."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_learning_curve(iterations: Sequence[dict[str, Any]], eval_curve: Sequence[dict[str, Any]],
                        path: Path, window: int = 10) -> None:
    """(a) forward-pass F1 and steps along training iterations; (b) eval F1 and steps per epoch (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    if iterations:
        x = list(range(1, len(iterations) + 1))
        left.plot(x, rolling([it["forward_f1"] for it in iterations], window), label=f"forward F1 (mean of {window})")
        left.set_xlabel("training iteration")
        left.set_ylabel("F1")
        left.set_ylim(-0.02, 1.02)
        twin = left.twinx()
        twin.plot(x, rolling([it["forward_steps"] for it in iterations], window), color="tab:orange",
                  label="forward steps")
        twin.set_ylabel("steps")
        epochs = sorted({it["epoch"] for it in iterations})
        for e in epochs[1:]:
            left.axvline(next(i for i, it in enumerate(iterations, 1) if it["epoch"] == e) - 0.5, ls="--", c="grey")
        left.legend(loc="lower left")
        twin.legend(loc="lower right")
    left.set_title("(a) training: forward passes")
    if eval_curve:
        ex = [p["epoch"] for p in eval_curve]
        right.plot(ex, [p["f1"] for p in eval_curve], "o-", label="eval F1")
        right.set_ylim(-0.02, 1.02)
        right.set_xlabel("epoch (0 = flat store)")
        right.set_ylabel("F1")
        twin2 = right.twinx()
        twin2.plot(ex, [p["steps"] for p in eval_curve], "s--", color="tab:orange", label="eval steps")
        twin2.set_ylabel("steps")
        right.legend(loc="lower left")
        twin2.legend(loc="lower right")
        right.set_xticks(ex)
    right.set_title("(b) exams on frozen snapshots: eval split")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def results_table(splits: dict[str, dict[str, Any]], coverage: dict[str, Any]) -> str:
    """A Markdown table: per split, flat and trained F1, mean steps, rho (CI), budget exhaustion, coverage."""
    head = ("| split | n | F1 flat | F1 trained | steps flat | steps trained | rho [95% CI] | "
            "exhausted flat | exhausted trained | question coverage | non-inferior |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    failures = []
    for name, cmp in splits.items():
        if not cmp.get("n", 1) or "store" not in cmp:
            continue
        s, f = cmp["store"], cmp["flat"]
        ci = cmp["rho_ci"] or [None, None]
        if cmp.get("failure"):
            failures.append(f"{name}: rho {cmp['failure']}.")
        lines.append(
            f"| {name} | {s['n']} | {_fmt(f['f1'])} | {_fmt(s['f1'])} | {_fmt(f['steps'], 2)} | {_fmt(s['steps'], 2)} | "
            f"{_fmt(cmp['rho'])} [{_fmt(ci[0])}, {_fmt(ci[1])}] | {_fmt(f['budget_exhausted'])} | "
            f"{_fmt(s['budget_exhausted'])} | {_fmt(coverage.get('questions', {}).get(name))} | "
            f"{_fmt(cmp['non_inferior'])} |")
    lines.append("")
    lines += failures + ([""] if failures else [])
    lines.append(f"Document coverage of the trained store: {_fmt(coverage.get('one_hop'))} one hop, "
                 f"{_fmt(coverage.get('two_hop'))} two hops.")
    return "\n".join(lines)


def template_table(f1_by_template: dict[str, float]) -> str:
    """A Markdown table of the flat store's F1 per question template (every question examined)."""
    lines = ["| template | F1 flat |", "|---|---|"]
    lines += [f"| {t} | {_fmt(f1)} |" for t, f1 in f1_by_template.items()]
    return "\n".join(lines)
