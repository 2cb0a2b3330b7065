"""The pieces of one GRPO step of the builder: jobs, rewards, samples, metrics (called by train_builder)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from librarian.cluster.rollout_worker import BuildJob, RolloutRecord
from librarian.pipelines.builder_corpora import Corpus
from librarian.pipelines.builder_rewards import (
    ProbeService,
    RewardConfig,
    RolloutRewards,
    fold_tokenless,
    rollout_rewards,
)


def step_jobs(corpora: Sequence[Corpus], step: int, batch: int, group: int, seed: int, version: int,
              hints: bool) -> list[BuildJob]:
    """Step `step`'s jobs: `batch` corpora in rotation, `group` builds each; deterministic in (seed, step)."""
    out = []
    for b in range(batch):
        c = corpora[(step * batch + b) % len(corpora)]
        out.append(BuildJob(f"s{step}-b{b}-{c.corpus_id}", c.corpus_id, c.docs, group, seed * 100_003 + step * 1009 + b,
                            version, c.hints() if hints else []))
    return out


def initial_utilities(corpora: Sequence[Corpus], probes: ProbeService) -> dict[str, float]:
    """U(F_0) of every corpus's flat store."""
    from librarian.cluster.rollout_worker import snapshot
    from librarian.workspace import Workspace

    return {c.corpus_id: probes.utility(snapshot(Workspace.from_documents(c.docs)), c.corpus_id) for c in corpora}


@dataclass
class ScoredBatch:
    """A step's records with their rewards, in job then group order."""

    records: list[RolloutRecord]
    rewards: list[RolloutRewards]


def score(batch: dict[str, list[RolloutRecord]], initial: dict[str, float], probes: ProbeService,
          cfg: RewardConfig) -> ScoredBatch:
    records = [r for recs in batch.values() for r in recs]
    return ScoredBatch(records, [rollout_rewards(r, initial[r.corpus_id], probes, cfg) for r in records])


def samples_for(scored: ScoredBatch, estimator: str, gamma: float, scale_by_std: bool) -> tuple[list, dict[str, float]]:
    """Multi-turn (or outcome) GRPO samples (groups are jobs: one corpus's G builds) and advantage figures:
    `nonzero_advantage_fraction`, the share of groups whose advantages are not all zero."""
    from librarian.learner import group_samples

    keep = [(r, w) for r, w in zip(scored.records, scored.rewards, strict=True)
            if any(t.has_tokens for t in r.trajectory.turns)]
    if not keep:
        return [], {}
    trajs = [r.trajectory for r, _ in keep]
    turn_rewards = [fold_tokenless(w.turn_rewards, [t.has_tokens for t in r.trajectory.turns]) for r, w in keep]
    groups = [r.job_id for r, _ in keep]
    samples, adv = group_samples(trajs, turn_rewards, groups, estimator=estimator, gamma=gamma,
                                 scale_by_std=scale_by_std, policy_versions=[r.policy_version for r, _ in keep])
    turn_groups = [g for g, rs in zip(groups, turn_rewards, strict=True) for _ in rs]
    return samples, {"nonzero_advantage_fraction": nonzero_group_fraction(adv.tolist(), turn_groups),
                     "advantage_abs_mean": statistics.fmean(abs(a) for a in adv.tolist()) if len(adv) else 0.0}


def nonzero_group_fraction(advantages: Sequence[float], groups: Sequence[Any], eps: float = 1e-9) -> float:
    """The share of groups with at least one advantage of magnitude above `eps` (0.0 for no groups)."""
    by_group: dict[Any, bool] = {}
    for a, g in zip(advantages, groups, strict=True):
        by_group[g] = by_group.get(g, False) or abs(a) > eps
    return sum(by_group.values()) / len(by_group) if by_group else 0.0


def valid_call_rate(trajectories: Sequence[Any]) -> float:
    """The share of policy turns (turns with tokens) whose message parsed into tool calls with no call error."""
    turns = [t for traj in trajectories for t in traj.turns if t.has_tokens]
    return statistics.fmean(float(bool(t.calls) and not t.errors) for t in turns) if turns else 0.0


def batch_metrics(scored: ScoredBatch) -> dict[str, float]:
    """Reward, utility and probe figures of a step (means over its builds)."""
    rw = scored.rewards
    if not rw:
        return {}
    mean = statistics.fmean
    deltas = [d for w in rw for d in _probe_deltas(w)]
    trajs = [r.trajectory for r in scored.records]
    return {
        "reward": mean(sum(w.turn_rewards) for w in rw),
        "sparse_reward": mean(w.sparse for w in rw),
        "final_utility": mean(w.final for w in rw),
        "initial_utility": mean(w.initial for w in rw),
        "utility_gain": mean(w.final - w.initial for w in rw),
        "probe_delta": mean(deltas) if deltas else 0.0,
        "probes_per_build": mean(len(w.probes) for w in rw),
        "builder_turns": mean(len(t.turns) for t in trajs),
        "builder_actions": mean(t.actions for t in trajs),
        "builder_errors": mean(t.errors for t in trajs),
        "valid_call_rate": valid_call_rate(trajs),
        "stopped": mean(float(t.end == "done") for t in trajs),
        "generated_tokens": float(sum(len(x.response_ids) for t in trajs for x in t.turns)),
    }


def _probe_deltas(w: RolloutRewards) -> list[float]:
    out, prev = [], w.initial
    for t in sorted(w.probes):
        out.append(w.probes[t] - prev)
        prev = w.probes[t]
    return out


def trajectory_rows(scored: ScoredBatch, step: int) -> list[dict[str, Any]]:
    """JSON-able rows of a step's trajectories with their rewards (for the trajectories artifact)."""
    rows = []
    for r, w in zip(scored.records, scored.rewards, strict=True):
        turns = [{"index": t.index, "text": t.text, "observation": t.observation[:500], "actions": t.actions,
                  "tokens": len(t.response_ids), "reward": w.turn_rewards[i]} for i, t in enumerate(r.trajectory.turns)]
        rows.append({"step": step, "job": r.job_id, "corpus": r.corpus_id, "index": r.index,
                     "policy_version": r.policy_version, "end": r.trajectory.end, "initial_utility": w.initial,
                     "probe_utilities": {str(k): v for k, v in w.probes.items()}, "final_utility": w.final,
                     "turns": turns})
    return rows
