"""Exams of `train_curator`: a budgeted reader on a frozen store, graded; and the figures per split.

An exam freezes the store (a read-only `SnapshotView` of the live
workspace; the search index is the one already in step with it), runs the
reader on every question with the task text the forward pass uses, and
grades each single answer with the question's official metric. `compare`
sets a store's exam beside the flat store's on the same questions: F1, mean
steps, rho (with a paired bootstrap CI), budget exhaustion and the
non-inferiority test of paper 001 Eq. 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tqdm import tqdm

from librarian.datasets.records import Question
from librarian.evaluation.metrics.bootstrap import paired_bootstrap_ci
from librarian.evaluation.metrics.rho import floor_failure, rho, rho_ci
from librarian.models.base import PolicyBackend
from librarian.rewards.scoring import score_answer
from librarian.roles import LoopConfig, Role, ToolContext, ToolEnv, Trajectory, run_episodes
from librarian.roles.kbgym_passes import forward_task
from librarian.search.base import SearchIndex
from librarian.workspace import SnapshotView, Workspace


@dataclass(frozen=True, slots=True)
class QuestionResult:
    """One graded exam (or forward-pass) episode."""

    qid: str
    template: str
    qclass: str
    f1: float
    actions: int
    exhausted: bool
    answer: str | None
    tokens_read: int
    synthetic_touched: int


def freeze(ws: Workspace) -> SnapshotView:
    """A read-only view of the workspace as it is now (edits after this do not show)."""
    return SnapshotView.from_nodes(*ws.state())


def grade(question: Question, traj: Trajectory) -> QuestionResult:
    s = traj.summary()
    return QuestionResult(question.id, question.template, question.qclass, score_answer(question, traj.answer),
                          traj.actions, traj.budget_exhausted, traj.answer, s["est_tokens_read"],
                          s["synthetic_touched"])


def run_exam(questions: Sequence[Question], store: SnapshotView, index: SearchIndex, backend: PolicyBackend,
             role: Role, loop: LoopConfig, batch: int = 32, desc: str = "exam",
             search_mode: str = "bm25") -> tuple[list[QuestionResult], list[Trajectory]]:
    """The reader on each question over the frozen store, `batch` episodes generated together."""
    ctx = ToolContext(store, index, None, search_mode=search_mode)
    results: list[QuestionResult] = []
    trajs: list[Trajectory] = []
    with tqdm(total=len(questions), desc=desc, unit="q", leave=False) as bar:
        for start in range(0, len(questions), batch):
            chunk = questions[start:start + batch]
            envs = [ToolEnv(role, ctx, forward_task(q.question)) for q in chunk]
            for q, traj in zip(chunk, run_episodes(envs, backend, role, loop), strict=True):
                results.append(grade(q, traj))
                trajs.append(traj)
            bar.update(len(chunk))
    return results, trajs


def summarize(results: Sequence[QuestionResult]) -> dict[str, Any]:
    """Mean F1, mean steps, budget exhaustion and reading cost of one exam."""
    n = len(results)
    if n == 0:
        return {"n": 0}
    return {"n": n, "f1": sum(r.f1 for r in results) / n, "steps": sum(r.actions for r in results) / n,
            "budget_exhausted": sum(r.exhausted for r in results) / n,
            "tokens_read": sum(r.tokens_read for r in results) / n,
            "touched_index": sum(r.synthetic_touched > 0 for r in results) / n}


def compare(store: Sequence[QuestionResult], flat: Sequence[QuestionResult], delta: float = 0.03,
            n_boot: int = 2000, seed: int = 0, floor: float | None = None) -> dict[str, Any]:
    """A store's exam against the flat store's on the same questions (paper 001 Eq. 1).

    With a `floor`, rho, its CI, non-inferiority and the hypothesis are given
    only when the flat store's F1 reaches it; below it they are None and
    `failure` says why (a reader that cannot answer makes rho meaningless).
    """
    by_id = {r.qid: r for r in flat}
    missing = [r.qid for r in store if r.qid not in by_id]
    if missing:
        raise ValueError(f"the flat-store exam lacks questions {missing[:5]}; compare needs the same questions")
    pairs = [(r, by_id[r.qid]) for r in store]
    if not pairs:
        return {"n": 0}
    s_steps = [float(a.actions) for a, _ in pairs]
    f_steps = [float(b.actions) for _, b in pairs]
    s_f1 = [a.f1 for a, _ in pairs]
    f_f1 = [b.f1 for _, b in pairs]
    out = {"store": summarize([a for a, _ in pairs]), "flat": summarize([b for _, b in pairs])}
    r = rho(s_steps, f_steps)
    ci = rho_ci(s_steps, f_steps, n_boot=n_boot, seed=seed)
    f1_ci = paired_bootstrap_ci(s_f1, f_f1, n_boot=n_boot, seed=seed)
    out.update({
        "rho": r, "rho_ci": ci.as_list(), "rho_ci_excludes_1": ci.excludes(1.0),
        "f1_delta": f1_ci.point, "f1_delta_ci": f1_ci.as_list(),
        "non_inferior": out["store"]["f1"] >= out["flat"]["f1"] - delta,
        "hypothesis_holds": r < 1.0 and out["store"]["f1"] >= out["flat"]["f1"] - delta,
    })
    failure = floor_failure(out["flat"]["f1"], out["store"]["f1"], floor)
    if failure:
        out.update({"rho": None, "rho_ci": None, "rho_ci_excludes_1": None, "non_inferior": None,
                    "hypothesis_holds": None, "failure": failure})
    return out


def per_class(results: Sequence[QuestionResult], key: str = "qclass") -> dict[str, dict[str, Any]]:
    """`summarize` per question class (or per `template` with key='template')."""
    classes = sorted({getattr(r, key) for r in results}, key=lambda c: (len(c), c))
    return {c: summarize([r for r in results if getattr(r, key) == c]) for c in classes}


def as_rows(results: Sequence[QuestionResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]
