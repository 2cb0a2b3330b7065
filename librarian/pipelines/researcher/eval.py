"""The researcher's evaluation: the scripted researcher on every arm, the trained policy, the headline figures.

`evaluate` runs `evaluate_researcher` (the scripted researcher on the arms of
`eval.arms`) and then the trained policy on the test questions through the
rollout workers (greedy, no hints, `eval.trained_budget` rounds);
`summarize` picks the headline figures (hierarchical vs flat source recall
with CIs, steps, the trained policy, runtime) for results.json.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from librarian.cluster.researcher_jobs import ResearchRecord
from librarian.evaluation.memory_eval import evaluate_researcher
from librarian.evaluation.memory_tasks import MemoryTask
from librarian.evaluation.metrics.bootstrap import bootstrap_ci
from librarian.models import make_backend
from librarian.pipelines.researcher.data import memo_fn
from librarian.pipelines.researcher.steps import StoreRef, eval_jobs, exhausted, rounds
from librarian.rewards.exploration import answer_in_context
from librarian.rewards.source_recall import source_precision, source_recall
from librarian.rl.protocols import RolloutSession
from librarian.rl.samples import valid_call_rate


def evaluate(cfg: Any, session: RolloutSession, store: StoreRef, task: Any, test: list) -> tuple[dict, dict]:
    """The scripted researcher on every arm (`evaluate_researcher`) and the trained policy on the hierarchical
    store."""
    arms = evaluate_researcher([MemoryTask(task.name, task.sessions, tuple(test))],
                               make_backend("scripted", policy=cfg.sft.teacher), cfg.eval.to_eval_config(),
                               memo_fn=memo_fn(cfg))
    trained: dict[str, Any] = {}
    if cfg.eval.trained:
        asked = test[: cfg.eval.trained_questions] if cfg.eval.trained_questions else test
        jobs = eval_jobs(asked, store, session.version, cfg.eval.trained_budget or cfg.rollout.budget, cfg.seed)
        records = [r for recs in session.rollout(jobs).values() for r in recs]
        trained = trained_summary(records, {q.id: q for q in test}, cfg.eval.n_boot, cfg.eval.seed)
    return arms, trained


def summarize(arms: dict, trained: dict, sft: dict) -> dict[str, Any]:
    """The headline figures: hierarchical vs flat source recall (with CIs), steps, the trained policy, runtime."""
    out: dict[str, Any] = {"sft_steps": int(sft.get("sft_steps", 0)), "sft": sft, "trained": trained}
    per_arm = arms.get("arms", {})
    for arm in ("hierarchical", "flat"):
        if arm in per_arm:
            out[f"source_recall_{arm}"] = per_arm[arm]["source_recall"]
            out[f"source_recall_{arm}_ci"] = per_arm[arm]["source_recall_ci"]
    for key in ("hierarchical_minus_flat", "hierarchical_minus_flat_ci", "latency_ratio_hierarchical_over_flat"):
        if key in arms:
            out[key] = arms[key]
    out["arms"] = per_arm
    out["runtime"] = {arm: {k: a[k] for k in ("construction_s", "query_latency_s_p50", "rounds_mean",
                                              "budget_exhausted") if k in a} for arm, a in per_arm.items()}
    return out


def trained_summary(records: Sequence[ResearchRecord], questions: dict[str, Any], n_boot: int, seed: int
                    ) -> dict[str, Any]:
    """The trained policy's figures on the evaluation questions (recall with a bootstrap CI, rounds, latency,
    valid-call rate, and each question's recall under `per_question`)."""
    if not records:
        return {}
    recalls = [source_recall(r.result.sources, questions[r.question_id].support) for r in records]
    ci = bootstrap_ci(recalls, n_boot=n_boot, seed=seed)
    trajs = [r.trajectory for r in records]
    return {
        "n": len(records), "source_recall": statistics.fmean(recalls), "source_recall_ci": [ci.low, ci.high],
        "source_precision": statistics.fmean(source_precision(r.result.sources, questions[r.question_id].support)
                                             for r in records),
        "answer_in_context": statistics.fmean(float(answer_in_context(r.result.context,
                                                                      questions[r.question_id].answers))
                                              for r in records),
        "rounds_mean": statistics.fmean(rounds(t) for t in trajs),
        "budget_exhausted": statistics.fmean(float(exhausted(t)) for t in trajs),
        "query_latency_s_p50": statistics.median(t.wall_s for t in trajs),
        "hints": sum(r.hints for r in records),
        "valid_call_rate": valid_call_rate(trajs),
        "per_question": {r.question_id: x for r, x in zip(records, recalls, strict=True)},  # paired comparisons
    }
