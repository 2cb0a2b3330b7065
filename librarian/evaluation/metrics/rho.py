"""rho (paper 001, Eq. 1): reader actions on a store relative to the flat store, on the same questions.

rho = mean actions on K_T / mean actions on K_0 over paired questions; below 1
is cheaper. Also what a point of corpus coverage buys (paper 001, Table I of
§VII-B): actions saved and F1 gained over the flat store per coverage point.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from librarian.evaluation.metrics.bootstrap import CI, bootstrap_ci

Paired = Sequence[float] | Mapping[str, float]


def align(store: Paired, flat: Paired, what: str = "actions") -> tuple[list[float], list[float]]:
    """Two paired samples as lists; mappings are matched by question id (every id must be in both)."""
    if isinstance(store, Mapping) != isinstance(flat, Mapping):
        raise ValueError(f"{what}: pass both samples as sequences or both as {{question id: value}} mappings")
    if isinstance(store, Mapping):
        only_s, only_f = sorted(set(store) - set(flat)), sorted(set(flat) - set(store))
        if only_s or only_f:
            raise ValueError(f"{what}: question ids differ between the store ({only_s[:5]} only) "
                             f"and the flat store ({only_f[:5]} only)")
        keys = sorted(store)
        return [float(store[k]) for k in keys], [float(flat[k]) for k in keys]  # type: ignore[index]
    if len(store) != len(flat):
        raise ValueError(f"{what}: {len(store)} store values but {len(flat)} flat-store values")
    if not store:
        raise ValueError(f"{what}: no questions")
    return [float(v) for v in store], [float(v) for v in flat]


def rho(store_actions: Paired, flat_actions: Paired) -> float:
    """Mean actions on the store over mean actions on the flat store (same questions)."""
    s, f = align(store_actions, flat_actions)
    if any(v < 0 for v in s + f):
        raise ValueError("action counts must be >= 0")
    if sum(f) <= 0:
        raise ValueError("rho is undefined: the flat store took no actions on these questions")
    return sum(s) / sum(f)


def rho_ci(store_actions: Paired, flat_actions: Paired, *, clusters: Sequence[Hashable] | None = None,
           n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> CI:
    """rho with a paired (or cluster) bootstrap CI; `ci.excludes(1.0)` marks a significant change."""
    s, f = align(store_actions, flat_actions)
    rho(s, f)  # validates
    return bootstrap_ci(s, f, statistic="ratio_of_means", clusters=clusters, n_boot=n_boot, seed=seed, level=level)


def floor_failure(flat_f1: float, store_f1: float, floor: float | None) -> str:
    """Why rho and non-inferiority are not reported ('' when they are): the flat store's F1 below `floor`.

    When the reader cannot answer on the flat store, rho compares two failures
    and non-inferiority holds trivially; neither says anything about the store.
    """
    if floor is None or flat_f1 >= floor:
        return ""
    both = " and the store's" if store_f1 < floor else ""
    return (f"not reported: the flat store's F1 {flat_f1:.3f}{both} ({store_f1:.3f}) is below the floor "
            f"{floor:.2f}; the reader does not answer these questions, so rho and non-inferiority would "
            "measure nothing (check the reader's policy and budget for this dataset)")


@dataclass(frozen=True, slots=True)
class CoverageGain:
    """Gain over the flat store divided by coverage in percentage points."""

    coverage_points: float
    actions_saved: float
    f1_gain: float
    actions_per_point: float | None
    f1_per_point: float | None


def gain_per_coverage_point(store_actions: Paired, flat_actions: Paired, store_f1: Paired, flat_f1: Paired,
                            coverage: float) -> CoverageGain:
    """(mean flat actions - mean store actions) and (mean store F1 - mean flat F1) per point of coverage.

    `coverage` is a share in [0, 1]; at zero coverage the per-point figures are None.
    """
    if not 0.0 <= coverage <= 1.0:
        raise ValueError(f"coverage must be a share in [0, 1] (got {coverage})")
    sa, fa = align(store_actions, flat_actions)
    sf, ff = align(store_f1, flat_f1, "f1")
    saved = sum(fa) / len(fa) - sum(sa) / len(sa)
    gain = sum(sf) / len(sf) - sum(ff) / len(ff)
    pts = coverage * 100
    return CoverageGain(pts, saved, gain, saved / pts if pts else None, gain / pts if pts else None)
