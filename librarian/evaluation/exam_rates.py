"""Builder exam rates with the corpus as the unit: solve rates on hard corpora, break rates on the keep set.

A store's build of a corpus *solves* it when the reader then answers every
hidden question (utility at the full score), and *breaks* a keep-set corpus
(one the flat store answers) when the reader no longer does. Each policy
builds each corpus once greedily and `k` times sampled; the sampled builds
of one corpus are not independent evidence about new corpora, so every
interval here resamples whole corpora (a cluster bootstrap), and a
difference between two policies pairs them corpus by corpus.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from librarian.evaluation.metrics.bootstrap import cluster_bootstrap_ci

FULL = 1.0 - 1e-9


def solved(utility: float) -> float:
    """1.0 when a build's utility is the full score (every hidden question answered), else 0.0."""
    return 1.0 if utility >= FULL else 0.0


def rate_ci(per_corpus: Mapping[str, Sequence[float]], n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The mean of 0/1 outcomes (builds within corpora) with a 95% CI resampling whole corpora; `n` corpora."""
    corpora = [c for c, v in per_corpus.items() if len(v)]
    if not corpora:
        return {"mean": None, "ci": None, "n": 0}
    values = [x for c in corpora for x in per_corpus[c]]
    labels = [c for c in corpora for _ in per_corpus[c]]
    ci = cluster_bootstrap_ci(values, labels, n_boot=n_boot, seed=seed)
    return {"mean": ci.point, "ci": ci.as_list(), "n": len(corpora), "builds": len(values)}


def paired_difference_ci(a: Mapping[str, Sequence[float]], b: Mapping[str, Sequence[float]], n_boot: int = 2000,
                         seed: int = 0) -> dict[str, Any]:
    """mean(a) - mean(b) over the corpora both hold, each corpus's own mean difference weighted equally, with a 95%
    CI resampling whole corpora (the two policies paired corpus by corpus)."""
    both = [c for c in a if c in b and len(a[c]) and len(b[c])]
    if not both:
        return {"mean": None, "ci": None, "n": 0}
    diffs = [statistics.fmean(a[c]) - statistics.fmean(b[c]) for c in both]
    ci = cluster_bootstrap_ci(diffs, both, n_boot=n_boot, seed=seed)
    return {"mean": ci.point, "ci": ci.as_list(), "n": len(both)}


def outcomes(per_corpus: Mapping[str, Mapping[str, Any]], store: str, corpora: Sequence[str], mode: str,
             broken: bool = False) -> dict[str, list[float]]:
    """Corpus -> the 0/1 outcomes of `store`'s builds in `mode` (greedy: one; sampled: k). Outcome 1 means solved,
    or with `broken` that a keep-set corpus the flat store answers is answered no longer."""
    out: dict[str, list[float]] = {}
    for c in corpora:
        entry = per_corpus.get(c, {}).get(store)
        if entry is None:
            continue
        utilities = [entry["utility"]] if mode == "greedy" else list(entry.get("sampled") or [entry["utility"]])
        out[c] = [1.0 - solved(u) if broken else solved(u) for u in utilities]
    return out


MODES = ("greedy", "sampled")


def exam_rates(per_corpus: Mapping[str, Mapping[str, Any]], hard: Sequence[str], keep: Sequence[str],
               stores: Sequence[str], pairs: Sequence[tuple[str, str]], n_boot: int = 2000,
               seed: int = 0) -> dict[str, Any]:
    """Solve rates on `hard`, break rates on `keep` and paired solve-rate differences (`pairs` of stores), each in
    both modes, with corpus-clustered CIs: {"solve": {store: {mode: ...}}, "break": ..., "differences":
    {"a-b": {mode: ...}}}."""
    rates: dict[str, Any] = {"solve": {}, "break": {}, "differences": {}, "hard_corpora": len(hard),
                             "keep_corpora": len(keep)}
    for store in stores:
        rates["solve"][store] = {m: rate_ci(outcomes(per_corpus, store, hard, m), n_boot, seed) for m in MODES}
        if keep:
            rates["break"][store] = {m: rate_ci(outcomes(per_corpus, store, keep, m, broken=True), n_boot, seed)
                                     for m in MODES}
    for a, b in pairs:
        if a in stores and b in stores:
            rates["differences"][f"{a}-{b}"] = {
                m: paired_difference_ci(outcomes(per_corpus, a, hard, m), outcomes(per_corpus, b, hard, m), n_boot,
                                        seed) for m in MODES}
    return rates
