"""The pieces of `train_researcher`'s steps: jobs, source-recall rewards, verified SFT, GRPO samples, metrics.

Paper 002: for each query a group of G trajectories, reward R = source recall
of the raw sessions the finalized context rests on, advantages normalised
within the group (`outcome_grpo`: the reward sits on the last generated turn,
so with gamma = 1 every turn of a trajectory carries its group-normalised R).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from librarian.cluster.researcher_worker import ResearchJob, ResearchRecord
from librarian.pipelines.builder_steps import nonzero_group_fraction, valid_call_rate
from librarian.rewards.exploration import answer_in_context, judge_exploration, trajectory_calls
from librarian.rewards.source_recall import source_recall
from librarian.roles.hints import HintInput


@dataclass(frozen=True, slots=True)
class StoreRef:
    """A workspace as it travels to the workers: IPC bytes or their object ref, and its content hash."""

    task_id: str
    data: Any
    digest: str


def hint_input(q: Any) -> HintInput:
    """A training question's reference for the hint generator: answers, gold session paths, keys."""
    return HintInput(q.question, tuple(q.answers), tuple(f"sessions/{s}" for s in q.support), tuple(q.keys))


def _job(store: StoreRef, q: Any, job_id: str, **kw: Any) -> ResearchJob:
    return ResearchJob(job_id, store.task_id, q.id, q.question, data=store.data, digest=store.digest, **kw)


def step_jobs(questions: Sequence[Any], store: StoreRef, step: int, batch: int, group: int, seed: int, version: int,
              hints: bool) -> list[ResearchJob]:
    """Step `step`'s jobs: `batch` questions in rotation, `group` trajectories each, deterministic in (seed, step)."""
    out = []
    for b in range(batch):
        q = questions[(step * batch + b) % len(questions)]
        out.append(_job(store, q, f"s{step}-b{b}-{q.id}", group_size=group, seed=seed * 100_003 + step * 1009 + b,
                        min_version=version, hint=hint_input(q) if hints else None))
    return out


def teacher_jobs(questions: Sequence[Any], store: StoreRef, teacher: str, budget: int, seed: int) -> list[ResearchJob]:
    """One greedy scripted-teacher episode per question (no hints), for verified SFT."""
    return [_job(store, q, f"sft-{q.id}", group_size=1, seed=seed, greedy=True, teacher=teacher, budget=budget)
            for q in questions]


def eval_jobs(questions: Sequence[Any], store: StoreRef, version: int, budget: int, seed: int,
              prefix: str = "eval") -> list[ResearchJob]:
    """One greedy episode per question with the current weights; evaluation jobs never carry a hint."""
    return [_job(store, q, f"{prefix}-{q.id}", group_size=1, seed=seed, min_version=version, greedy=True,
                 budget=budget) for q in questions]


@dataclass
class Scored:
    """A batch's records (job then group order) with their source-recall rewards."""

    records: list[ResearchRecord]
    rewards: list[float]


def score(batch: dict[str, list[ResearchRecord]], questions: dict[str, Any]) -> Scored:
    """Source recall of each record's finalized raw sources against its question's gold sessions."""
    records = [r for recs in batch.values() for r in recs]
    return Scored(records, [source_recall(r.result.sources, questions[r.question_id].support) for r in records])


def rounds(trajectory: Any) -> int:
    """Research rounds the policy chose (the forced finalize is not one)."""
    return sum(1 for t in trajectory.turns if not t.forced)


def exhausted(trajectory: Any) -> bool:
    """Whether the round budget ran out (finalize was forced)."""
    return any(t.forced for t in trajectory.turns)


def samples_for(scored: Scored, estimator: str, gamma: float, scale_by_std: bool) -> tuple[list, dict[str, float]]:
    """GRPO samples (groups are jobs: one question's G trajectories; the reward sits on the last generated turn)
    and advantage figures: `nonzero_advantage_fraction`, the share of groups whose advantages are not all zero
    (the builder's `nonzero_group_fraction`), and `advantage_abs_mean`."""
    from librarian.learner import group_samples

    keep = [(r, w) for r, w in zip(scored.records, scored.rewards, strict=True)
            if any(t.has_tokens for t in r.trajectory.turns)]
    if not keep:
        return [], {}
    turn_rewards = []
    for r, w in keep:
        n = sum(1 for t in r.trajectory.turns if t.has_tokens)
        turn_rewards.append([0.0] * (n - 1) + [w])
    groups = [r.job_id for r, _ in keep]
    samples, adv = group_samples([r.trajectory for r, _ in keep], turn_rewards, groups,
                                 estimator=estimator, gamma=gamma, scale_by_std=scale_by_std,
                                 policy_versions=[r.policy_version for r, _ in keep])
    values = adv.tolist()
    turn_groups = [g for g, rs in zip(groups, turn_rewards, strict=True) for _ in rs]
    return samples, {"nonzero_advantage_fraction": nonzero_group_fraction(values, turn_groups),
                     "advantage_abs_mean": statistics.fmean(abs(a) for a in values) if values else 0.0}


def batch_metrics(scored: Scored) -> dict[str, float]:
    """Reward (source recall), its spread within groups, rounds, budget exhaustion, hints, tool errors, the
    valid-call rate (policy turns whose message parsed into calls with no call error), tokens."""
    if not scored.records:
        return {}
    mean = statistics.fmean
    groups: dict[str, list[float]] = {}
    for r, w in zip(scored.records, scored.rewards, strict=True):
        groups.setdefault(r.job_id, []).append(w)
    trajs = [r.trajectory for r in scored.records]
    return {
        "reward": mean(scored.rewards),
        "reward_full_recall": mean(float(w >= 1.0) for w in scored.rewards),
        "reward_group_std": mean(statistics.pstdev(g) for g in groups.values()),
        "groups_without_signal": mean(float(len(set(g)) == 1) for g in groups.values()),  # equal rewards
        "rounds": mean(rounds(t) for t in trajs),
        "budget_exhausted": mean(float(exhausted(t)) for t in trajs),
        "hints_per_episode": mean(r.hints for r in scored.records),
        "tool_errors": mean(t.errors for t in trajs),
        "valid_call_rate": valid_call_rate(trajs),
        "sufficient": mean(float(r.result.sufficient) for r in scored.records),
        "generated_tokens": float(sum(len(x.response_ids) for t in trajs for x in t.turns)),
    }


def canonical_ref(workspace: Any) -> Callable[[str], str]:
    """A ref (path or id) -> the node id it names in `workspace` (the ref itself when it names nothing)."""
    from librarian.workspace import views
    from librarian.workspace.errors import WorkspaceError

    def canon(ref: str) -> str:
        try:
            return views.resolve(workspace, ref.strip()).id
        except WorkspaceError:
            return ref.strip().strip("/")

    return canon


@dataclass
class Verified:
    """The teacher trajectories kept for SFT, and how many failed each check."""

    trajectories: list[Any]
    teacher: int
    answer_missing: int
    judge_rejected: int
    teacher_recall: float

    def summary(self) -> dict[str, float]:
        return {"teacher_episodes": float(self.teacher), "verified": float(len(self.trajectories)),
                "answer_missing": float(self.answer_missing), "judge_rejected": float(self.judge_rejected),
                "teacher_recall": self.teacher_recall}


def verify(records: Sequence[ResearchRecord], questions: dict[str, Any], canonical: Callable[[str], str],
           judge: Callable[..., Any] | None = None) -> Verified:
    """Keep a teacher trajectory when the gold answer is in its context and the exploration judge accepts it.

    `judge(request, calls, context, cited, gold_sources)` replaces the rule
    judge (an `LLMExplorationJudge`, which applies the rules first).
    """
    kept, no_answer, rejected, recalls = [], 0, 0, []
    for rec in records:
        q = questions[rec.question_id]
        recalls.append(source_recall(rec.result.sources, q.support))
        if not answer_in_context(rec.result.context, q.answers):
            no_answer += 1
            continue
        calls = trajectory_calls(rec.trajectory)
        if judge is None:
            verdict = judge_exploration(calls, rec.result.context, rec.result.cited, canonical)
        else:
            verdict = judge(q.question, calls, rec.result.context, rec.result.cited, list(q.support))
        if not verdict.accepted:
            rejected += 1
            continue
        kept.append(rec.trajectory)
    return Verified(kept, len(records), no_answer, rejected, statistics.fmean(recalls) if recalls else 0.0)


def clip(samples: Sequence[Any], max_tokens: int) -> tuple[list[Any], int]:
    """Samples cut to their last `max_tokens` tokens (0: unchanged), and how many were cut.

    The oldest context goes first, so the latest turns and the finalize stay;
    a cut sample whose first kept token was generated has that token masked
    out (a sample's first token has nothing to be predicted from). Samples
    left with no trained token are dropped.
    """
    from librarian.learner.batch import PolicySample

    if max_tokens <= 0:
        return list(samples), 0
    if max_tokens < 2:
        raise ValueError(f"sft.max_tokens must be 0 (no limit) or >= 2, got {max_tokens}")
    out, cut = [], 0
    for s in samples:
        if len(s.token_ids) <= max_tokens:
            out.append(s)
            continue
        cut += 1
        at = len(s.token_ids) - max_tokens
        mask = (0,) + tuple(s.loss_mask[at + 1:])
        if any(mask):
            out.append(PolicySample(s.token_ids[at:], mask, s.old_logprobs[at:], (0.0,) + tuple(s.advantages[at + 1:]),
                                    s.policy_version))
    return out, cut


def trained_summary(records: Sequence[ResearchRecord], questions: dict[str, Any], n_boot: int, seed: int
                    ) -> dict[str, Any]:
    """The trained policy's figures on the evaluation questions (recall with a bootstrap CI, rounds, latency,
    valid-call rate, and each question's recall under `per_question`)."""
    from librarian.evaluation.metrics.bootstrap import bootstrap_ci
    from librarian.rewards.source_recall import source_precision

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


def trajectory_rows(scored: Scored, step: int) -> list[dict[str, Any]]:
    """JSON-able rows of a step's trajectories with their rewards (the trajectories artifact)."""
    rows = []
    for r, w in zip(scored.records, scored.rewards, strict=True):
        turns = [{"index": t.index, "text": t.text[:1000], "observation": t.observation[:500], "forced": t.forced,
                  "calls": [c.get("name") for c in t.calls], "tokens": len(t.response_ids)}
                 for t in r.trajectory.turns]
        rows.append({"step": step, "job": r.job_id, "question": r.question_id, "index": r.index,
                     "policy_version": r.policy_version, "reward": w, "sources": list(r.result.sources),
                     "hints": r.hints, "end": r.trajectory.end, "turns": turns})
    return rows
