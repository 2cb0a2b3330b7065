"""GRPO advantage estimators as pure functions over tensors, registered by name.

Two forms (paper 000 "multi-turn GRPO"):

- `outcome_grpo`: one scalar score per trajectory, normalised within its
  group (mean, and the unbiased std unless Dr.GRPO style `scale_by_std=False`);
  this is verl's `compute_grpo_outcome_advantage`, called as is.
- `multi_turn_grpo`: per-turn rewards r_t; per-turn returns
  G_t = sum_{k>=t} gamma^(k-t) r_k; every turn of every trajectory is one
  sample, and the returns are normalised across all m x n turn-samples of a
  group.

The Stop-choice property. The builder decides when to Stop, so a turn that
changes nothing (reward 0) must be neither rewarded nor punished relative to
stopping. We therefore normalise *returns*, never rewards. The naive
alternative, normalising each turn's reward, (r_t - mu) / sigma, then summing
to returns, adds -mu / sigma for every extra turn to all earlier turns'
advantages: a hidden per-turn cost when the mean reward is positive (a bonus
when negative), which pushes the policy to stop early (late). With returns
normalised by one (mu, sigma) shared by the whole group, an extra zero-reward
turn leaves every other turn's return unchanged (gamma = 1), so two
trajectories that differ only by such a turn get identical advantages on their
common turns, and the extra turn gets exactly the advantage of the Stop that
follows it. The shared statistics depend on the group's turn counts, but they
are one constant per group, a baseline that is the same whether a given
trajectory stopped or continued. (With gamma < 1 an extra turn discounts later
rewards: that is the explicit cost of discounting, not a hidden one.)

Singleton groups follow verl's convention (mean 0, std 1). Each estimator is
also registered in verl's registry (`verl.trainer.ppo.core_algos.
register_adv_est`) in a token-level form, so verl's trainer can select it by
name; turn boundaries are the runs of 1s in the response mask.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch

from librarian.learner.errors import LearnerError

EPSILON = 1e-6


def _check_1d(name: str, t: torch.Tensor, n: int | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t, dtype=torch.float32)
    if t.dim() != 1:
        raise LearnerError(f"{name} must be a 1-d tensor, got shape {tuple(t.shape)}")
    if n is not None and t.shape[0] != n:
        raise LearnerError(f"{name} has {t.shape[0]} entries, expected {n}")
    if not torch.isfinite(t).all():
        raise LearnerError(f"{name} contains a non-finite value")
    return t.float()


def _check_ids(name: str, ids: Sequence[Hashable], n: int) -> list[Hashable]:
    ids = list(ids.tolist() if isinstance(ids, np.ndarray | torch.Tensor) else ids)
    if len(ids) != n:
        raise LearnerError(f"{name} has {len(ids)} entries, expected {n}")
    return ids


def _check_gamma(gamma: float) -> float:
    if not 0.0 < float(gamma) <= 1.0:
        raise LearnerError(f"gamma must be in (0, 1], got {gamma}")
    return float(gamma)


def group_normalize(values: torch.Tensor, group_ids: Sequence[Hashable], eps: float = EPSILON,
                    scale_by_std: bool = True) -> torch.Tensor:
    """(x - mean_g) / (std_g + eps) within each group g (unbiased std; singletons: mean 0, std 1)."""
    values = _check_1d("values", values)
    ids = _check_ids("group_ids", group_ids, values.shape[0])
    out = torch.empty_like(values)
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(ids):
        members.setdefault(g, []).append(i)
    for rows in members.values():
        idx = torch.tensor(rows)
        x = values[idx]
        mean, std = (x.mean(), x.std()) if len(rows) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out[idx] = (x - mean) / (std + eps) if scale_by_std else x - mean
    return out


def turn_returns(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], gamma: float = 1.0) -> torch.Tensor:
    """G_t = r_t + gamma G_{t+1} within each trajectory; rows of a trajectory are its turns in order."""
    rewards = _check_1d("turn_rewards", turn_rewards)
    ids = _check_ids("traj_ids", traj_ids, rewards.shape[0])
    gamma = _check_gamma(gamma)
    out = torch.zeros_like(rewards)
    running: dict[Hashable, float] = {}
    for i in range(len(ids) - 1, -1, -1):
        g = float(rewards[i]) + gamma * running.get(ids[i], 0.0)
        running[ids[i]] = g
        out[i] = g
    return out


def _traj_groups(traj_ids: list[Hashable], group_ids: list[Hashable]) -> None:
    seen: dict[Hashable, Hashable] = {}
    for t, g in zip(traj_ids, group_ids, strict=True):
        if seen.setdefault(t, g) != g:
            raise LearnerError(f"trajectory {t!r} has turns in two groups ({seen[t]!r} and {g!r})")


def multi_turn_grpo(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], group_ids: Sequence[Hashable],
                    gamma: float = 1.0, eps: float = EPSILON,
                    scale_by_std: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) per turn: returns normalised across each group's turn-samples."""
    rewards = _check_1d("turn_rewards", turn_rewards)
    tids = _check_ids("traj_ids", traj_ids, rewards.shape[0])
    gids = _check_ids("group_ids", group_ids, rewards.shape[0])
    _traj_groups(tids, gids)
    returns = turn_returns(rewards, tids, gamma)
    return group_normalize(returns, gids, eps, scale_by_std), returns


def outcome_grpo(scores: torch.Tensor, group_ids: Sequence[Hashable], eps: float = EPSILON,
                 scale_by_std: bool = True) -> torch.Tensor:
    """One advantage per trajectory: verl's GRPO outcome estimator on its scalar score."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    scores = _check_1d("scores", scores)
    ids = _check_ids("group_ids", group_ids, scores.shape[0])
    rewards = scores.unsqueeze(1).clone()
    index = np.empty(len(ids), dtype=object)
    index[:] = ids
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones_like(rewards), index, epsilon=eps,
                                            norm_adv_by_std_in_grpo=scale_by_std)
    return adv[:, 0]


def outcome_grpo_per_turn(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], group_ids: Sequence[Hashable],
                          gamma: float = 1.0, eps: float = EPSILON,
                          scale_by_std: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Outcome GRPO in the per-turn layout: each trajectory's discounted return from its first turn,
    normalised across trajectories of the group, copied to all its turns."""
    rewards = _check_1d("turn_rewards", turn_rewards)
    tids = _check_ids("traj_ids", traj_ids, rewards.shape[0])
    gids = _check_ids("group_ids", group_ids, rewards.shape[0])
    _traj_groups(tids, gids)
    returns = turn_returns(rewards, tids, gamma)
    first: dict[Hashable, int] = {}
    for i, t in enumerate(tids):
        first.setdefault(t, i)
    order = list(first)
    adv = outcome_grpo(returns[[first[t] for t in order]], [gids[first[t]] for t in order], eps, scale_by_std)
    by_traj = dict(zip(order, adv.tolist(), strict=True))
    return torch.tensor([by_traj[t] for t in tids]), returns


# name -> turn-level estimator (turn_rewards, traj_ids, group_ids, gamma, eps, scale_by_std) -> (adv, returns)
TurnEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]
ESTIMATORS: dict[str, TurnEstimator] = {
    "outcome_grpo": outcome_grpo_per_turn,
    "multi_turn_grpo": multi_turn_grpo,
}


def get_estimator(name: str) -> TurnEstimator:
    """The turn-level estimator called `name`."""
    if name not in ESTIMATORS:
        raise LearnerError(f"unknown advantage estimator {name!r}; choose one of {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]


def turn_index_from_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """Per token, the 0-based turn it belongs to: turns are runs of 1s; masked tokens after a run belong to
    it (so a reward placed on them counts for that turn); tokens before the first run belong to turn 0."""
    mask = (response_mask > 0).long()
    prev = torch.nn.functional.pad(mask[:, :-1], (1, 0))
    starts = (mask == 1) & (prev == 0)
    return (torch.cumsum(starts.long(), dim=1) - 1).clamp(min=0)


def _token_level(estimator: TurnEstimator, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                 index: Sequence[Hashable], gamma: float, eps: float,
                 scale_by_std: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
        raise LearnerError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                           f"{tuple(response_mask.shape)} must be equal 2-d shapes")
    turn_of = turn_index_from_mask(response_mask)
    rows, turns, rewards, groups = [], [], [], []
    ids = _check_ids("index", index, response_mask.shape[0])
    for b in range(response_mask.shape[0]):
        n = int(turn_of[b].max()) + 1 if response_mask[b].any() else 0
        for k in range(n):
            rows.append(b)
            turns.append(k)
            rewards.append(float(token_level_rewards[b][turn_of[b] == k].sum()))
            groups.append(ids[b])
    adv_t, ret_t = estimator(torch.tensor(rewards), rows, groups, gamma=gamma, eps=eps, scale_by_std=scale_by_std)
    adv = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    ret = torch.zeros_like(adv)
    for i, (b, k) in enumerate(zip(rows, turns, strict=True)):
        sel = (turn_of[b] == k) & (response_mask[b] > 0)
        adv[b, sel] = adv_t[i]
        ret[b, sel] = ret_t[i]
    return adv, ret


def token_level_estimator(name: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """verl's estimator signature (token_level_rewards, response_mask, index, config) over a turn-level one."""
    estimator = get_estimator(name)

    def fn(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Hashable],
           config: Any = None, epsilon: float = EPSILON, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
        gamma = float(getattr(config, "gamma", 1.0)) if config is not None else 1.0
        scale = bool(getattr(config, "norm_adv_by_std_in_grpo", True)) if config is not None else True
        return _token_level(estimator, token_level_rewards, response_mask, index, gamma, epsilon, scale)

    fn.__name__ = f"librarian_{name}"
    return fn


VERL_NAMES = {name: f"librarian_{name}" for name in ESTIMATORS}
_REGISTERED: dict[str, Callable[..., Any]] = {}


def register_with_verl() -> dict[str, str]:
    """Register the token-level forms in verl's registry (idempotent); returns estimator -> verl name."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, verl_name in VERL_NAMES.items():
        if verl_name not in ADV_ESTIMATOR_REGISTRY:
            fn = _REGISTERED.setdefault(name, token_level_estimator(name))
            register_adv_est(verl_name)(fn)
    return dict(VERL_NAMES)
