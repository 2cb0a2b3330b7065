"""The builder's transfer figures: exam solve and break rates of one run, and the same pooled over seeds.

One run's exam (`pipelines/builder/exam.py`) holds, per held-out corpus and store, the greedy build's utility and
the k sampled builds' utilities, and `rates` (`evaluation.exam_rates`: corpus-clustered CIs). `run_fields`
flattens them into a benchmark's result fields:

- `exam_solve_rate_<store>_<mode>` (hard corpora) and `exam_break_rate_<store>_<mode>` (keep set), with `_ci`;
- `exam_trained_minus_untrained_<mode>` and `exam_trained_minus_sft_only_<mode>` (hard corpora, paired by corpus),
  with `_ci`; the unsuffixed names are the `sampled` mode (pass@1 estimated from k samples per corpus, as paper 000
  reports BRIGHT), the headline.

`pooled_fields` pools seeds (one benchmark folder, or its results.json, a seed) with the seed as the unit: each seed's figures, and for
each difference the crossed seeds x corpora interval (`metrics.seeds.crossed_interval`: the seed-to-seed and the
corpus-to-corpus spread both in it) beside the between-seed t interval of the per-seed means.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.exam_rates import MODES, outcomes
from librarian.evaluation.metrics.seeds import crossed_interval, seed_interval

STORES = {"flat": "flat", "untrained": "untrained_builder", "sft_only": "sft_builder", "trained": "trained_builder",
          "scripted": "scripted_builder"}  # short name -> exam store, in the order a table or plot shows them
DIFFERENCES = {"trained_minus_untrained": ("trained_builder", "untrained_builder"),
               "trained_minus_sft_only": ("trained_builder", "sft_builder")}
HEADLINE = "sampled"


def run_fields(exam: Mapping[str, Any]) -> dict[str, Any]:
    """A run's exam rates as flat result fields (see the module docstring); {} without rates."""
    rates = exam.get("rates") or {}
    if not rates:
        return {}
    out: dict[str, Any] = {}
    for short, store in STORES.items():
        for kind in ("solve", "break"):
            for mode, r in (rates.get(kind, {}).get(store) or {}).items():
                out[f"exam_{kind}_rate_{short}_{mode}"] = r["mean"]
                out[f"exam_{kind}_rate_{short}_{mode}_ci"] = r["ci"]
    for short, (a, b) in DIFFERENCES.items():
        for mode, d in (rates.get("differences", {}).get(f"{a}-{b}") or {}).items():
            out[f"exam_{short}_{mode}"] = d["mean"]
            out[f"exam_{short}_{mode}_ci"] = d["ci"]
            if mode == HEADLINE:
                out[f"exam_{short}"], out[f"exam_{short}_ci"] = d["mean"], d["ci"]
    out["exam_hard_corpora"], out["exam_keep_corpora"] = rates.get("hard_corpora"), rates.get("keep_corpora")
    return out


def corpus_means(per_corpus: Mapping[str, Mapping[str, Any]], store: str, corpora: Sequence[str], mode: str,
                 broken: bool = False) -> dict[str, float]:
    """Corpus -> the mean 0/1 outcome of `store`'s builds there (solved, or with `broken` a keep corpus broken)."""
    return {c: statistics.fmean(v) for c, v in outcomes(per_corpus, store, corpora, mode, broken).items() if v}


def _sets(per_corpus: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    hard = sorted(c for c, stores in per_corpus.items() if stores.get("flat", {}).get("set", "hard") == "hard")
    keep = sorted(c for c, stores in per_corpus.items() if stores.get("flat", {}).get("set") == "keep")
    return hard, keep


def seed_exam(path: Path) -> dict[str, Any]:
    """One seed's exam: from a benchmark OUT folder's `run/results.json`, or from a benchmark results.json that
    keeps it (`exam`, a committed seed)."""
    path = Path(path)
    file = path if path.is_file() else path / "run" / "results.json"
    return json.loads(file.read_text(encoding="utf-8")).get("exam") or {}


def pooled_fields(folders: Sequence[Path]) -> dict[str, Any]:
    """The exam pooled over seeds (benchmark folders, or their results.json files, each with the run's exam): per
    seed the run fields, and per difference and mode the crossed and the between-seed intervals; {} when a run has
    no exam."""
    exams = []
    for folder in folders:
        exam = seed_exam(folder)
        if not exam.get("corpora") or not exam.get("rates"):
            return {}
        exams.append(exam)
    out: dict[str, Any] = {"per_seed": [{"folder": str(f), **run_fields(e)} for f, e in zip(folders, exams,
                                                                                           strict=True)]}
    hard_sets = {tuple(_sets(e["corpora"])[0]) for e in exams}
    paired = len(hard_sets) == 1  # every seed examined on the same corpora: the crossed model applies
    for short, (a, b) in DIFFERENCES.items():
        for mode in MODES:
            cells, seed_means = {}, []
            for i, e in enumerate(exams):
                hard = _sets(e["corpora"])[0]
                xa, xb = corpus_means(e["corpora"], a, hard, mode), corpus_means(e["corpora"], b, hard, mode)
                diffs = {c: xa[c] - xb[c] for c in hard if c in xa and c in xb}
                cells[f"seed{i}"] = diffs
                seed_means.append(statistics.fmean(diffs.values()))
            between = seed_interval(seed_means)
            crossed = crossed_interval(cells) if paired else between
            suffix = "" if mode == HEADLINE else f"_{mode}"
            for name in dict.fromkeys((f"exam_{short}_{mode}", f"exam_{short}{suffix}")):  # in order: a stable file
                out[name], out[f"{name}_ci"] = crossed.mean, crossed.as_list()
                out[f"{name}_seed_ci"] = between.as_list()
                out[f"{name}_per_seed"] = seed_means
    out.update(_pooled_rates(exams))
    out["crossed_model"] = paired
    return out


def _pooled_rates(exams: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Solve and break rates of every store averaged over seeds, each with its between-seed t interval; and the
    trained minus untrained break rate (the keep set)."""
    out: dict[str, Any] = {}
    for short, store in STORES.items():
        for mode in MODES:
            for kind, broken in (("solve", False), ("break", True)):
                means = []
                for e in exams:
                    hard, keep = _sets(e["corpora"])
                    values = corpus_means(e["corpora"], store, keep if broken else hard, mode, broken)
                    if values:
                        means.append(statistics.fmean(values.values()))
                if len(means) == len(exams) and len(means) >= 2:
                    ci = seed_interval(means)
                    out[f"exam_{kind}_rate_{short}_{mode}"], out[f"exam_{kind}_rate_{short}_{mode}_ci"] = \
                        ci.mean, ci.as_list()
    for mode in MODES:
        a, b = out.get(f"exam_break_rate_trained_{mode}"), out.get(f"exam_break_rate_untrained_{mode}")
        if a is not None and b is not None:
            out[f"exam_break_rate_trained_minus_untrained_{mode}"] = a - b
    return out
