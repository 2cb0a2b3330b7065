"""From scored rollouts to the learner's batch: the off-policy limit, group advantages, flat-group filtering.

`keep_fresh` drops (or keeps, `off_policy.stale: keep`) the records more than
`off_policy.max_staleness` updates behind the learner and reports the
staleness it saw. `policy_samples` computes the estimator's advantages
(`learner.advantage`; groups are jobs) and packs the samples; with
`learner.filter_flat_groups` only the groups whose advantages are not all zero
are trained on (DAPO's dynamic sampling without refill).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from librarian.learner import group_samples
from librarian.rl.task import Scored

FLAT_EPS = 1e-9  # an advantage no larger than this is zero


class StaleError(ValueError):
    """A record claims a policy version the learner has not published."""


def keep_fresh(scored: Scored, current: int, max_staleness: int, policy: str = "drop") -> tuple[Scored, dict]:
    """The records at most `max_staleness` updates behind version `current` (all of them, `keep`), and
    `stale_dropped`, `staleness_max`, `staleness_mean` (over every record of the step)."""
    stale = [current - r.policy_version for r in scored.records]
    if any(s < 0 for s in stale):
        raise StaleError(f"a trajectory claims policy version {max(r.policy_version for r in scored.records)}, "
                         f"newer than the learner's {current}")
    keep = [i for i, s in enumerate(stale) if policy == "keep" or s <= max_staleness]
    return scored.subset(keep), {"stale_dropped": float(len(stale) - len(keep)),
                                 "staleness_max": float(max(stale, default=0)),
                                 "staleness_mean": statistics.fmean(stale) if stale else 0.0}


def policy_samples(scored: Scored, cfg: Any) -> tuple[list, dict[str, float]]:
    """GRPO samples of `scored` under the learner config `cfg` (advantage, gamma, scale_by_std,
    filter_flat_groups) and the advantage figures: `nonzero_advantage_fraction` (groups whose advantages are
    not all zero, before any filtering), `advantage_abs_mean`, `flat_groups_dropped` when filtering dropped any."""
    samples, figures, flat = _group_advantages(scored, cfg)
    if not cfg.filter_flat_groups or not flat:
        return samples, figures
    kept = scored.subset([i for i, r in enumerate(scored.records) if r.group not in flat])
    samples = _group_advantages(kept, cfg)[0] if kept.records else []  # within-group advantages are unchanged
    return samples, {**figures, "flat_groups_dropped": float(len(flat))}


def _group_advantages(scored: Scored, cfg: Any) -> tuple[list, dict[str, float], set]:
    """The samples, the advantage figures and the groups (`record.group`) whose advantages are all zero."""
    keep = [i for i, rs in enumerate(scored.turn_rewards) if rs]  # records with a turn to train on
    if not keep:
        return [], {"nonzero_advantage_fraction": 0.0}, set()
    part = scored.subset(keep)
    groups = [r.group for r in part.records]
    samples, adv = group_samples([r.trajectory for r in part.records], part.turn_rewards, groups,
                                 estimator=cfg.advantage, gamma=cfg.gamma, scale_by_std=cfg.scale_by_std,
                                 policy_versions=[r.policy_version for r in part.records])
    values = adv.tolist()
    turn_groups = [g for g, rs in zip(groups, part.turn_rewards, strict=True) for _ in rs]
    moved = {g for a, g in zip(values, turn_groups, strict=True) if abs(a) > FLAT_EPS}
    return samples, {"nonzero_advantage_fraction": nonzero_group_fraction(values, turn_groups),
                     "advantage_abs_mean": statistics.fmean(abs(a) for a in values) if values else 0.0
                     }, set(groups) - moved


def nonzero_group_fraction(advantages: Sequence[float], groups: Sequence[Any], eps: float = FLAT_EPS) -> float:
    """The share of groups with at least one advantage of magnitude above `eps` (0.0 for no groups)."""
    by_group: dict[Any, bool] = {}
    for a, g in zip(advantages, groups, strict=True):
        by_group[g] = by_group.get(g, False) or abs(a) > eps
    return sum(by_group.values()) / len(by_group) if by_group else 0.0


def executed_call_rate(trajectories: Sequence[Any]) -> float:
    """The share of attempted calls (parsed or not) that executed: a call that parsed but failed in its tool (a
    merge of a file that does not exist) counts as valid in `valid_call_rate` and as not executed here."""
    attempted = executed = 0
    for traj in trajectories:
        for t in traj.turns:
            failed = t.failed_calls
            attempted += len(t.calls) + len(t.errors)
            executed += len(t.calls) - failed
    return executed / attempted if attempted else 0.0


def valid_call_rate(trajectories: Sequence[Any]) -> float:
    """The share of policy turns (turns with tokens) whose message parsed into tool calls with no call error."""
    turns = [t for traj in trajectories for t in traj.turns if t.has_tokens]
    return statistics.fmean(float(bool(t.calls) and not t.errors) for t in turns) if turns else 0.0
