"""Bootstrap 95% confidence intervals: one-sample, paired, and cluster (resampling whole clusters).

Percentile intervals from a seeded generator, so the same data and seed give
the same interval. The reported interval always contains the point estimate:
when the percentile interval excludes it (possible for skewed statistics on
tiny samples) it is widened to reach it. Named statistics are computed from
per-cluster sums, vectorised over resamples; any other statistic is a
callable `(x, y) -> float` evaluated once per resample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

Statistic = Callable[[np.ndarray, np.ndarray | None], float]
NAMED = ("mean", "ratio_of_means", "mean_difference")


@dataclass(frozen=True, slots=True)
class CI:
    """A point estimate with its bootstrap interval [low, high] at `level`."""

    point: float
    low: float
    high: float
    level: float = 0.95
    n_boot: int = 0

    def excludes(self, value: float) -> bool:
        """True when `value` lies outside the interval (e.g. rho's CI excluding 1)."""
        return value < self.low or value > self.high

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def _array(name: str, values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d sequence of numbers (got shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _cluster_index(clusters: Sequence[Hashable] | None, n: int) -> tuple[np.ndarray, int]:
    if clusters is None:
        return np.arange(n), n
    if len(clusters) != n:
        raise ValueError(f"clusters has {len(clusters)} labels for {n} observations")
    _, inv = np.unique(np.asarray([str(c) for c in clusters]), return_inverse=True)
    return inv, int(inv.max()) + 1


def _named(stat: str, sx: np.ndarray, sy: np.ndarray | None, cnt: np.ndarray) -> np.ndarray:
    """The statistic from (resampled) per-cluster sums; arrays may carry a leading resample axis."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if stat == "mean":
            return sx / cnt
        if stat == "mean_difference":
            return (sx - sy) / cnt
        return sx / sy  # ratio_of_means: (sum x / n) / (sum y / n)


def bootstrap_ci(x: Sequence[float], y: Sequence[float] | None = None, *, statistic: str | Statistic = "mean",
                 clusters: Sequence[Hashable] | None = None, n_boot: int = 2000, seed: int = 0,
                 level: float = 0.95) -> CI:
    """A bootstrap CI of `statistic` over observations x (and paired y).

    `statistic` is "mean" (of x), "mean_difference" (mean x - mean y, paired),
    "ratio_of_means" (mean x / mean y, paired; rho) or a callable. With
    `clusters` (one label per observation) whole clusters are resampled.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    if not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer (got {n_boot!r})")
    xa = _array("x", x)
    ya = None if y is None else _array("y", y)
    if ya is not None and ya.size != xa.size:
        raise ValueError(f"paired samples differ in length: x has {xa.size}, y has {ya.size}")
    if isinstance(statistic, str):
        if statistic not in NAMED:
            raise ValueError(f"unknown statistic {statistic!r}; expected one of {NAMED} or a callable")
        if statistic != "mean" and ya is None:
            raise ValueError(f"statistic {statistic!r} needs the paired sample y")
        if statistic == "ratio_of_means" and ya.sum() <= 0:  # type: ignore[union-attr]
            raise ValueError("ratio_of_means needs a positive denominator: y sums to <= 0")
    elif not callable(statistic):
        raise ValueError("statistic must be a name or a callable (x, y) -> float")
    inv, k = _cluster_index(clusters, xa.size)
    rng = np.random.default_rng(seed)
    if isinstance(statistic, str):
        sx = np.bincount(inv, weights=xa, minlength=k)
        sy = None if ya is None else np.bincount(inv, weights=ya, minlength=k)
        cnt = np.bincount(inv, minlength=k).astype(float)
        point = float(_named(statistic, sx.sum(), None if sy is None else sy.sum(), cnt.sum()))
        draws = []
        for start in range(0, n_boot, 256):  # chunks keep the resample matrix small
            m = min(256, n_boot - start)
            idx = rng.integers(0, k, size=(m, k)) + (np.arange(m) * k)[:, None]
            w = np.bincount(idx.ravel(), minlength=m * k).reshape(m, k).astype(float)
            draws.append(_named(statistic, w @ sx, None if sy is None else w @ sy, w @ cnt))
        samples = np.concatenate(draws)
    else:
        point = float(statistic(xa, ya))
        members = [np.flatnonzero(inv == c) for c in range(k)]
        samples = np.empty(n_boot)
        for b in range(n_boot):
            idx = np.concatenate([members[c] for c in rng.integers(0, k, size=k)])
            samples[b] = statistic(xa[idx], None if ya is None else ya[idx])
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    lo, hi = float(lo), float(hi)
    if not math.isnan(point):
        lo, hi = min(lo, point), max(hi, point)
    return CI(point, lo, hi, level, n_boot)


def paired_bootstrap_ci(x: Sequence[float], y: Sequence[float], statistic: str | Statistic = "mean_difference",
                        **kw) -> CI:
    """`bootstrap_ci` over pairs (x_i, y_i) resampled together."""
    return bootstrap_ci(x, y, statistic=statistic, **kw)


def cluster_bootstrap_ci(x: Sequence[float], clusters: Sequence[Hashable], y: Sequence[float] | None = None,
                         statistic: str | Statistic = "mean", **kw) -> CI:
    """`bootstrap_ci` resampling whole clusters (corpora, conversations) with replacement."""
    return bootstrap_ci(x, y, statistic=statistic, clusters=clusters, **kw)


def unpaired_difference_ci(x: Sequence[float], y: Sequence[float], n_boot: int = 2000, seed: int = 0,
                           level: float = 0.95) -> CI:
    """A bootstrap CI of mean(x) - mean(y) for two independent samples (each resampled on its own).

    For example a training run's per-build rewards in its last steps (x) against its first steps (y).
    """
    xs, ys = _array("x", x), _array("y", y)
    rng = np.random.default_rng(seed)
    bx = xs[rng.integers(0, xs.size, size=(n_boot, xs.size))].mean(axis=1)
    by = ys[rng.integers(0, ys.size, size=(n_boot, ys.size))].mean(axis=1)
    diffs = bx - by
    alpha = (1.0 - level) / 2.0
    point = float(xs.mean() - ys.mean())
    low, high = (float(v) for v in np.quantile(diffs, [alpha, 1.0 - alpha]))
    return CI(point, min(low, point), max(high, point), level, n_boot)


def cluster_difference_ci(x: Sequence[float], x_clusters: Sequence[Hashable], y: Sequence[float],
                          y_clusters: Sequence[Hashable], n_boot: int = 2000, seed: int = 0,
                          level: float = 0.95) -> CI:
    """A bootstrap CI of mean(x) - mean(y) for two independent samples of clustered observations: each sample's
    whole clusters resampled on its own (e.g. the builds of the corpora at a run's two ends)."""
    xs, ys = _array("x", x), _array("y", y)
    rng = np.random.default_rng(seed)
    draws = []
    for values, labels in ((xs, x_clusters), (ys, y_clusters)):
        inv, k = _cluster_index(labels, values.size)
        sums = np.bincount(inv, weights=values, minlength=k)
        counts = np.bincount(inv, minlength=k).astype(float)
        w = np.stack([np.bincount(rng.integers(0, k, size=k), minlength=k) for _ in range(n_boot)]).astype(float)
        draws.append((w @ sums) / (w @ counts))
    diffs = draws[0] - draws[1]
    alpha = (1.0 - level) / 2.0
    point = float(xs.mean() - ys.mean())
    low, high = (float(v) for v in np.quantile(diffs, [alpha, 1.0 - alpha]))
    return CI(point, min(low, point), max(high, point), level, n_boot)
