"""Intervals with the seed as the unit: a between-seed t interval, and a crossed seeds x corpora mixed model.

A learning method's claim is made across training seeds: each seed is one
run (its own sampling, SFT order and updates), so runs, not the builds inside
them, are the independent units. `seed_interval` is the t interval of the
per-seed means. When every seed is examined on the same corpora, a seed's
mean carries the corpora's sampling noise too, shared by all seeds; the
crossed random-effects model `crossed_interval` (y = mu + seed + corpus +
error, balanced, variance components from the two-way ANOVA mean squares,
Satterthwaite's degrees of freedom) puts both the seed-to-seed and the
corpus-to-corpus spread into the interval of mu.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True, slots=True)
class MeanInterval:
    """A mean with its interval [low, high] at `level`, the standard error and the degrees of freedom used."""

    mean: float
    low: float
    high: float
    se: float
    df: float
    level: float = 0.95

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def _t_interval(mean: float, se: float, df: float, level: float) -> MeanInterval:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if se == 0.0:
        return MeanInterval(mean, mean, mean, 0.0, df, level)
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return MeanInterval(mean, mean - half, mean + half, se, df, level)


def seed_interval(values: Sequence[float], level: float = 0.95) -> MeanInterval:
    """The t interval of the mean of per-seed values (n - 1 degrees of freedom); needs 2 or more seeds."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2 or not np.all(np.isfinite(x)):
        raise ValueError(f"a between-seed interval needs 2 or more finite per-seed values, got {list(values)}")
    return _t_interval(float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)), float(x.size - 1), level)


def crossed_interval(cells: Mapping[str, Mapping[str, float]], level: float = 0.95) -> MeanInterval:
    """The interval of mu in y[s, c] = mu + a_s + b_c + e_sc (seeds s and corpora c crossed, each cell once).

    `cells[seed][corpus]` must be balanced: every seed holds the same corpora. Var(mean) = (MS_seed + MS_corpus -
    MS_error) / (S C), floored at the error term's share, with Satterthwaite's degrees of freedom; with one corpus
    it is the between-seed t interval. Needs 2 or more seeds.
    """
    seeds = sorted(cells)
    if len(seeds) < 2:
        raise ValueError(f"a crossed interval needs 2 or more seeds, got {len(seeds)}")
    corpora = sorted(cells[seeds[0]])
    if not corpora or any(sorted(cells[s]) != corpora for s in seeds):
        raise ValueError("every seed must hold the same corpora (a balanced seeds x corpora table)")
    y = np.array([[float(cells[s][c]) for c in corpora] for s in seeds])
    if not np.all(np.isfinite(y)):
        raise ValueError("the seeds x corpora table holds NaN or infinite values")
    n_s, n_c = y.shape
    if n_c == 1:
        return seed_interval(y[:, 0], level)
    grand = float(y.mean())
    seed_means, corpus_means = y.mean(axis=1), y.mean(axis=0)
    ms_seed = n_c * float(((seed_means - grand) ** 2).sum()) / (n_s - 1)
    ms_corpus = n_s * float(((corpus_means - grand) ** 2).sum()) / (n_c - 1)
    resid = y - seed_means[:, None] - corpus_means[None, :] + grand
    ms_error = float((resid ** 2).sum()) / ((n_s - 1) * (n_c - 1))
    combined = max(ms_seed + ms_corpus - ms_error, ms_error, 0.0)
    se = math.sqrt(combined / (n_s * n_c))
    if combined == ms_error:  # the seed and corpus components estimate at zero: the error term's df
        df = float((n_s - 1) * (n_c - 1))
    else:
        denom = ms_seed ** 2 / (n_s - 1) + ms_corpus ** 2 / (n_c - 1) + ms_error ** 2 / ((n_s - 1) * (n_c - 1))
        df = combined ** 2 / denom if denom > 0 else float((n_s - 1) * (n_c - 1))
    return _t_interval(grand, se, max(df, 1.0), level)
