"""The figures of a prequential stream: windows, the amortization crossover, and the plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.metrics.bootstrap import bootstrap_ci
from librarian.evaluation.metrics.breakeven import break_even
from librarian.evaluation.metrics.rho import rho, rho_ci


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def compare(served: Sequence[dict[str, Any]], n_boot: int, seed: int) -> dict[str, Any]:
    """rho (served actions over flat-store actions on the same questions) with its CI, F1 both ways with CIs."""
    acts = [float(r["actions"]) for r in served]
    flat = [float(r["flat_actions"]) for r in served]
    f1 = [float(r["f1"]) for r in served]
    f1_flat = [float(r["flat_f1"]) for r in served]
    out: dict[str, Any] = {"n": len(served), "rho": None, "rho_ci": None}
    if sum(flat) > 0:
        out["rho"] = rho(acts, flat)
        out["rho_ci"] = rho_ci(acts, flat, n_boot=n_boot, seed=seed).as_list()
    out.update({"f1": _mean(f1), "f1_ci": bootstrap_ci(f1, n_boot=n_boot, seed=seed).as_list() if f1 else None,
                "f1_flat": _mean(f1_flat),
                "f1_flat_ci": bootstrap_ci(f1_flat, n_boot=n_boot, seed=seed).as_list() if f1_flat else None,
                "cost": _mean(acts), "cost_flat": _mean(flat),
                "tokens": _mean([float(r["tokens"]) for r in served]),
                "tokens_flat": _mean([float(r["flat_tokens"]) for r in served])})
    return out


def windows(records: Sequence[dict[str, Any]], size: int, n_boot: int, seed: int) -> list[dict[str, Any]]:
    """One entry per `size` consecutive stream questions (the last may be shorter): rho vs the flat store,
    F1 and the flat store's F1 (with CIs), cost (mean reader actions) and the version it ended on."""
    out = []
    for k, start in enumerate(range(0, len(records), size)):
        chunk = records[start:start + size]
        versions = sorted({r["version"] for r in chunk})
        out.append({"window": k, "first": start, **compare(chunk, n_boot, seed + k),
                    "version": chunk[-1]["version"], "versions": versions})
    return out


def crossover(records: Sequence[dict[str, Any]], construction: float, last: dict[str, Any],
              curator_only: float | None = None) -> dict[str, Any]:
    """When the reading saved pays back the construction cost (both in reader/curator actions).

    `in_stream`: the first stream question at which the cumulative saving
    (flat-store actions minus served actions) reaches the construction spent
    so far, None if it never did; `questions`: N* = construction / the last
    window's saving per question (paper 001, Eq. 2), None without a saving;
    `questions_curator_only`: the same without the checks' re-asked questions.
    """
    saved, at = 0.0, None
    for i, r in enumerate(records, start=1):
        saved += float(r["flat_actions"]) - float(r["actions"])
        if at is None and saved > 0 and saved >= float(r["construction_so_far"]):
            at = i
    return {"in_stream": at, "saved_in_stream": saved,
            "questions": break_even(construction, last["cost_flat"], last["cost"]) if last else None,
            "questions_curator_only": break_even(curator_only, last["cost_flat"], last["cost"])
            if last and curator_only is not None else None,
            "saving_per_question_last_window": (last["cost_flat"] - last["cost"]) if last else None}


def plot(windows_: Sequence[dict[str, Any]], heldout: dict[str, Any], path: Path) -> None:
    """(a) rho per window with its 95% CI, the held-out rho as a band; (b) F1 served and flat with CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = [w["first"] + w["n"] for w in windows_]
    with_rho = [(xi, w) for xi, w in zip(x, windows_, strict=True) if w["rho"] is not None]
    if with_rho:
        xs = [xi for xi, _ in with_rho]
        left.plot(xs, [w["rho"] for _, w in with_rho], "o-", label="rho per window (served / flat)")
        left.fill_between(xs, [w["rho_ci"][0] for _, w in with_rho], [w["rho_ci"][1] for _, w in with_rho],
                          alpha=0.25, label="95% CI")
    if heldout.get("rho") is not None:
        lo, hi = heldout["rho_ci"]
        left.axhspan(lo, hi, color="tab:green", alpha=0.15)
        left.axhline(heldout["rho"], color="tab:green", ls="--", label=f"held-out rho {heldout['rho']:.3f}")
    left.axhline(1.0, color="grey", lw=0.8)
    left.set_xlabel("stream questions answered")
    left.set_ylabel("rho (reader actions vs flat store)")
    left.set_title("(a) cost: rho per window")
    left.legend(loc="lower left", fontsize=8)
    for key, label, colour in (("f1", "F1 served", "tab:blue"), ("f1_flat", "F1 flat store", "tab:orange")):
        right.plot(x, [w[key] for w in windows_], "o-", color=colour, label=label)
        right.fill_between(x, [w[f"{key}_ci"][0] for w in windows_], [w[f"{key}_ci"][1] for w in windows_],
                           color=colour, alpha=0.2)
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("stream questions answered")
    right.set_ylabel("F1")
    right.set_title("(b) accuracy per window (95% CIs)")
    right.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
