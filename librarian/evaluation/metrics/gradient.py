"""The key-coverage gradient (paper 001 §VII-B, Table IV): rho and F1 per question group.

Groups (`datasets.kbgym.gradient.GROUPS`: trained, both, one, neither) differ
only in how much of the question the training set touched; every group is
examined on the same frozen store and on the flat store by the same reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from librarian.evaluation.metrics.bootstrap import CI
from librarian.evaluation.metrics.rho import rho_ci


@dataclass(frozen=True, slots=True)
class QueryResult:
    """One question's outcome for one store: F1, actions, and whether the budget ran out."""

    f1: float
    actions: int
    exhausted: bool = False


@dataclass(frozen=True, slots=True)
class GradientRow:
    """One group: n, rho with its CI, mean F1 and actions on the store and on the flat store."""

    group: str
    n: int
    rho: CI
    f1: float
    f1_flat: float
    actions: float
    actions_flat: float

    @property
    def significant(self) -> bool:
        """The paper's asterisk: the CI on rho excludes 1."""
        return self.rho.excludes(1.0)


def gradient_table(groups: Mapping[str, Sequence[str]], store: Mapping[str, QueryResult],
                   flat: Mapping[str, QueryResult], *, pooled: bool = True, n_boot: int = 2000,
                   seed: int = 0) -> list[GradientRow]:
    """One row per group (in the given order) plus, with `pooled`, an `all` row over every question."""
    if not groups:
        raise ValueError("gradient_table needs at least one group")
    rows: list[GradientRow] = []
    pool: list[str] = []
    for name, qids in list(groups.items()) + ([("all", None)] if pooled else []):  # type: ignore[list-item]
        ids = list(dict.fromkeys(pool)) if qids is None else list(qids)
        if not ids:
            raise ValueError(f"gradient group {name!r} has no questions")
        missing = [q for q in ids if q not in store or q not in flat]
        if missing:
            raise ValueError(f"gradient group {name!r}: no result for questions {missing[:5]} "
                             f"on {'the store' if missing[0] not in store else 'the flat store'}")
        if qids is not None:
            pool += ids
        s, f = [store[q] for q in ids], [flat[q] for q in ids]
        ci = rho_ci([r.actions for r in s], [r.actions for r in f], n_boot=n_boot, seed=seed)
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        rows.append(GradientRow(name, len(ids), ci, mean([r.f1 for r in s]), mean([r.f1 for r in f]),
                                mean([r.actions for r in s]), mean([r.actions for r in f])))
    return rows
