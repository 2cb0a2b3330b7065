"""The researcher's RL task (paper 002): questions in rotation, source-recall rewards, verified SFT, evaluation.

For each question a group of G trajectories, reward R = source recall of the
raw sessions the finalized context rests on, advantages normalised within
the group (`outcome_grpo`: the reward sits on the last generated turn, so with
gamma = 1 every turn of a trajectory carries its group-normalised R).
`ResearcherTask` is what the step loop (`librarian.rl.loop`) runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from librarian.cluster.researcher_jobs import ResearchJob, ResearchRecord
from librarian.learner.batch import PolicySample
from librarian.learner.sft import verified_samples
from librarian.models import make_backend
from librarian.models.base import SamplingParams
from librarian.rewards.exploration import (
    LLMExplorationJudge,
    answer_in_context,
    judge_exploration,
    trajectory_calls,
)
from librarian.rewards.source_recall import source_recall
from librarian.rl.protocols import RolloutSession
from librarian.rl.samples import valid_call_rate
from librarian.rl.task import Scored, job_seed, rotation
from librarian.roles.probing_env import snapshot
from librarian.roles.researcher_hints import HintInput
from librarian.workspace import views
from librarian.workspace.errors import WorkspaceError


@dataclass(frozen=True, slots=True)
class StoreRef:
    """A workspace as it travels to the workers: IPC bytes or their object ref, and its content hash."""

    task_id: str
    data: Any
    digest: str


def store_ref(task_id: str, workspace: Any) -> StoreRef:
    """`workspace` put in Ray's object store once; every job carries the reference and its content hash."""
    import ray

    return StoreRef(task_id, ray.put(snapshot(workspace)), workspace.content_hash())


def hint_input(q: Any) -> HintInput:
    """A training question's reference for the hint generator: answers, gold session paths, keys."""
    return HintInput(q.question, tuple(q.answers), tuple(f"sessions/{s}" for s in q.support), tuple(q.keys))


def _job(store: StoreRef, q: Any, job_id: str, **kw: Any) -> ResearchJob:
    return ResearchJob(job_id, store.task_id, q.id, q.question, data=store.data, digest=store.digest, **kw)


def teacher_jobs(questions: Sequence[Any], store: StoreRef, teacher: str, budget: int, seed: int) -> list[ResearchJob]:
    """One greedy scripted-teacher episode per question (no hints), for verified SFT."""
    return [_job(store, q, f"sft-{q.id}", group_size=1, seed=seed, greedy=True, teacher=teacher, budget=budget)
            for q in questions]


def eval_jobs(questions: Sequence[Any], store: StoreRef, version: int, budget: int, seed: int,
              prefix: str = "eval") -> list[ResearchJob]:
    """One greedy episode per question with the current weights; evaluation jobs never carry a hint."""
    return [_job(store, q, f"{prefix}-{q.id}", group_size=1, seed=seed, min_version=version, greedy=True,
                 budget=budget) for q in questions]


def rounds(trajectory: Any) -> int:
    """Research rounds the policy chose (the forced finalize is not one)."""
    return sum(1 for t in trajectory.turns if not t.forced)


def exhausted(trajectory: Any) -> bool:
    """Whether the round budget ran out (finalize was forced)."""
    return any(t.forced for t in trajectory.turns)


class ResearcherTask:
    """The researcher's hint-guided GRPO task over the training questions of the workspace `store` (the first
    `data.grpo_questions` of them, when set), taken in turn."""

    def __init__(self, cfg: Any, questions: Sequence[Any], store: StoreRef) -> None:
        self.cfg = cfg
        self.questions = list(questions)[: cfg.data.grpo_questions or None]
        self.by_id = {q.id: q for q in self.questions}
        self.store = store

    def jobs(self, step: int, version: int) -> list[ResearchJob]:
        hints, learner = self.cfg.rollout.hint_every > 0, self.cfg.learner
        return [_job(self.store, q, f"s{step}-b{b}-{q.id}", group_size=learner.group_size,
                     seed=job_seed(self.cfg.seed, step, b), min_version=version, hint=hint_input(q) if hints else None)
                for b, q in rotation(self.questions, step, learner.batch_size)]

    def turn_rewards(self, records: list[Any]) -> tuple[list[list[float]], list[float]]:
        """Source recall, on the last turn with tokens (0 on the earlier ones)."""
        recall = [source_recall(r.result.sources, self.by_id[r.question_id].support) for r in records]
        rewards = []
        for r, w in zip(records, recall, strict=True):
            n = sum(1 for t in r.trajectory.turns if t.has_tokens)
            rewards.append([0.0] * (n - 1) + [w] if n else [])
        return rewards, recall

    def metrics(self, scored: Scored) -> dict[str, float]:
        """Reward (source recall), its spread within groups, rounds, budget exhaustion, hints, tool errors, the
        valid-call rate (policy turns whose message parsed into calls with no call error), tokens."""
        if not scored.records:
            return {}
        mean = statistics.fmean
        recall: list[float] = scored.details
        groups: dict[str, list[float]] = {}
        for r, w in zip(scored.records, recall, strict=True):
            groups.setdefault(r.job_id, []).append(w)
        trajs = [r.trajectory for r in scored.records]
        return {
            "reward": mean(recall),
            "reward_full_recall": mean(float(w >= 1.0) for w in recall),
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

    def rows(self, scored: Scored, step: int) -> list[dict[str, Any]]:
        """JSON-able rows of a step's trajectories with their rewards (the trajectories artifact)."""
        rows = []
        for r, w in zip(scored.records, scored.details, strict=True):
            turns = [{"index": t.index, "text": t.text[:1000], "observation": t.observation[:500], "forced": t.forced,
                      "calls": [c.get("name") for c in t.calls], "tokens": len(t.response_ids)}
                     for t in r.trajectory.turns]
            rows.append({"step": step, "job": r.job_id, "question": r.question_id, "index": r.index,
                         "policy_version": r.policy_version, "reward": w, "sources": list(r.result.sources),
                         "hints": r.hints, "end": r.trajectory.end, "turns": turns})
        return rows


def canonical_ref(workspace: Any) -> Callable[[str], str]:
    """A ref (path or id) -> the node id it names in `workspace` (the ref itself when it names nothing)."""
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
    """Samples of at most `max_tokens` tokens (0: unchanged), and how many were cut.

    A longer sample gives two: its head (the system prompt, the request and
    the first rounds: what a student with a short budget sees) and its tail
    (the latest rounds and the finalize; the oldest context goes first). A
    tail whose first kept token was generated has that token masked out (a
    sample's first token has nothing to be predicted from). A part with no
    trained token is dropped.
    """
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
        if any(s.loss_mask[:max_tokens]):
            out.append(PolicySample(s.token_ids[:max_tokens], s.loss_mask[:max_tokens], s.old_logprobs[:max_tokens],
                                    s.advantages[:max_tokens], s.policy_version))
        at = len(s.token_ids) - max_tokens
        mask = (0,) + tuple(s.loss_mask[at + 1:])
        if any(mask):
            out.append(PolicySample(s.token_ids[at:], mask, s.old_logprobs[at:], (0.0,) + tuple(s.advantages[at + 1:]),
                                    s.policy_version))
    return out, cut


def exploration_judge(sft: Any) -> Callable[..., Any] | None:
    """`sft.judge`'s exploration judge: None for the rule judge, else an `LLMExplorationJudge` on its backend."""
    if sft.judge == "rule":
        return None

    model = make_backend(sft.judge_backend, **dict(sft.judge_options))
    params = SamplingParams(max_new_tokens=160, temperature=0.0)
    return LLMExplorationJudge(lambda p: model.generate([[{"role": "user", "content": p}]], None, params)[0][0].text)


def teacher_samples(cfg: Any, session: RolloutSession, store: StoreRef, questions: Sequence[Any], workspace: Any
                    ) -> tuple[list, dict[str, Any]]:
    """The scripted teacher's episodes on the first `sft.questions` training questions, the verified ones' SFT
    samples (clipped to `sft.max_tokens`), and what was kept."""
    chosen = list(questions[: cfg.sft.questions])
    batch = session.rollout(teacher_jobs(chosen, store, cfg.sft.teacher, cfg.sft.budget, cfg.seed))
    records = [r for recs in batch.values() for r in recs]
    verified = verify(records, {q.id: q for q in chosen}, canonical_ref(workspace), exploration_judge(cfg.sft))
    samples, cut = clip(verified_samples(verified.trajectories, lambda _t: True), cfg.sft.max_tokens)
    return samples, {**verified.summary(), "clipped": cut}
