"""Exam summaries: the means of one exam, and a store's exam set beside the flat store's.

The exams themselves (a reader over questions on a frozen snapshot, graded
per question) are the answerer probe's (`librarian.rewards.probe_exam`).
`compare` sets a store's exam beside the flat store's on the same questions:
F1 and actions with bootstrap CIs, rho with its paired bootstrap CI, tokens
and files read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from librarian.evaluation.metrics.bootstrap import bootstrap_ci, paired_bootstrap_ci
from librarian.evaluation.metrics.rho import floor_failure, rho_ci
from librarian.rewards.probe_exam import ExamError, ExamResult


def summarize(results: Sequence[ExamResult]) -> dict[str, Any]:
    """Means of one exam: F1, actions, budget exhaustion, tokens and files read."""
    n = len(results)
    if n == 0:
        return {"n": 0}
    mean = lambda xs: sum(xs) / n  # noqa: E731
    return {"n": n, "f1": mean([r.f1 for r in results]), "actions": mean([r.actions for r in results]),
            "exhausted": mean([float(r.exhausted) for r in results]),
            "tokens_read": mean([r.tokens_read for r in results]), "files_read": mean([r.files_read for r in results]),
            "synthetic_read": mean([r.synthetic_read for r in results])}


def compare(store: Sequence[ExamResult], flat: Sequence[ExamResult], n_boot: int = 2000, seed: int = 0,
            delta: float = 0.03, floor: float | None = None) -> dict[str, Any]:
    """A store's exam against the flat store's on the same (question, repeat) pairs, with bootstrap CIs.

    With a `floor`, rho (and its CI) and non-inferiority are None when the
    flat store's F1 is below it, and `failure` says so.
    """
    by_key = {(r.qid, r.repeat): r for r in flat}
    missing = [r.qid for r in store if (r.qid, r.repeat) not in by_key]
    if missing:
        raise ExamError(f"the flat-store exam lacks questions {missing[:5]}; compare needs the same questions")
    if not store:
        raise ExamError("compare needs at least one exam result")
    pairs = [(r, by_key[(r.qid, r.repeat)]) for r in store]
    s_act = [float(a.actions) for a, _ in pairs]
    f_act = [float(b.actions) for _, b in pairs]
    s_f1 = [a.f1 for a, _ in pairs]
    f_f1 = [b.f1 for _, b in pairs]
    clusters = [a.qid for a, _ in pairs] if any(a.repeat for a, _ in pairs) else None
    rho = rho_ci(s_act, f_act, clusters=clusters, n_boot=n_boot, seed=seed)
    f1 = bootstrap_ci(s_f1, clusters=clusters, n_boot=n_boot, seed=seed)
    actions = bootstrap_ci(s_act, clusters=clusters, n_boot=n_boot, seed=seed)
    delta_f1 = paired_bootstrap_ci(s_f1, f_f1, clusters=clusters, n_boot=n_boot, seed=seed)
    summary = summarize([a for a, _ in pairs])
    out = {**summary, "f1_ci": f1.as_list(), "actions_ci": actions.as_list(), "rho": rho.point,
           "rho_ci": rho.as_list(), "rho_ci_excludes_1": rho.excludes(1.0), "f1_delta": delta_f1.point,
           "f1_delta_ci": delta_f1.as_list(), "f1_flat": sum(f_f1) / len(f_f1),
           "non_inferior": summary["f1"] >= sum(f_f1) / len(f_f1) - delta}
    failure = floor_failure(out["f1_flat"], summary["f1"], floor)
    if failure:
        out.update({"rho": None, "rho_ci": None, "rho_ci_excludes_1": None, "non_inferior": None,
                    "failure": failure})
    return out
