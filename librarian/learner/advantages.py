"""GRPO advantage estimators as pure functions over tensors, registered by name.

Two forms (paper 000: advantages are "computed at each step, following
multi-turn GRPO"):

- `outcome_grpo`: one scalar score per trajectory, normalised within its group
  (mean, and the unbiased std unless Dr.GRPO style `scale_by_std=False`); the
  semantics of verl's `compute_grpo_outcome_advantage`, computed here in
  float64 (see "Arithmetic" below for the two places it differs).
- `multi_turn_grpo`: per-turn rewards r_t; per-turn returns-to-go
  G_t = sum_{k>=t} gamma^(k-t) r_k; the return at turn index t is compared
  only with the returns at the *same turn index* t of the other trajectories
  of its group: A_{i,t} = (G_{i,t} - mean_t) / (std_t + eps).

Why a per-turn-index baseline. A return-to-go shrinks along a trajectory (it
sums fewer rewards), so returns at different turn indices are not comparable
samples of one quantity. Pooling all m x n turn-samples of a group into one
(mean, std), as an earlier version did, makes the advantage a function of the
turn position: four identical builds with rewards [0.5, 0] got +0.935 on
turn 0 and -0.935 on turn 1, identical malformed builds [x, 0, 0] got
[-1.12, 0, +1.12], i.e. a gradient from trajectories that are all the same.
The baseline of a turn must be an estimate of the value of that turn's
situation; the group's returns at the same index are that estimate, as in
turn-level credit assignment for multi-turn GRPO (MT-GRPO, Zeng et al. 2025,
"Reinforcing multi-turn reasoning in LLM agents via turn-level credit
assignment"). With one turn per trajectory it is exactly outcome GRPO.

Padding. Trajectories stop after different numbers of turns. A trajectory that
ended before index t enters the statistics of index t with its LAST turn's
return: a stopped build is treated as if it kept stopping in its terminal
state, collecting nothing more. Every trajectory of a group therefore
contributes exactly one value to every index, and a padded value contributes
to the statistics only (it is not a turn and gets no advantage).

The Stop-choice property. The builder decides when to Stop, so a turn that
changes nothing (reward 0) must be neither rewarded nor punished relative to
stopping. We therefore normalise *returns*, never rewards: normalising each
turn's reward, (r_t - mu) / sigma, then summing to returns, adds -mu / sigma
for every extra turn to all earlier turns' advantages, a hidden per-turn cost
when the mean reward is positive (a bonus when negative). With gamma = 1 a
zero-reward no-op turn just before the final Stop has the same return as the
Stop, and, because the other trajectories are padded with their last return,
the same set of compared returns at both indices whenever the others have
stopped by then: the no-op turn gets exactly the advantage of the Stop after
it. (With gamma < 1 an extra turn discounts later rewards: the explicit cost
of discounting, not a hidden one.)

Arithmetic. Returns and statistics are computed in float64 with exactly
rounded sums (`math.fsum`), so they do not depend on the order of the
trajectories; tensors come back as float32. If a group's (index's) unbiased
std is below eps the advantages there are exactly 0, in both scalings: the
values are equal up to rounding and dividing their differences by a near-zero
std would turn float noise into a full-size signal (the float32 version of this
module gave up to ±0.11 to four builds that all scored 1, their per-turn
rewards summing to 1 along different paths; verl gives 0). A singleton
group gets advantage 0: a group of one has no baseline to compare with. verl's
outcome estimator uses mean 0 and std 1 there, i.e. the raw score; we do not,
because a raw return is on a different scale from the z-scores of the other
groups, and in the multi-turn form it would again depend on the turn position
(early turns sum more rewards); a singleton (e.g. when the stale filter
dropped the rest of its group) simply carries no signal. Elsewhere
`outcome_grpo` agrees with verl to float rounding.

Each estimator is also registered in verl's registry (`verl.trainer.ppo.
core_algos.register_adv_est`) in a token-level form, so verl's trainer can
select it by name; turn boundaries are the runs of 1s in the response mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner.config import ADVANTAGES
from librarian.learner.errors import LearnerError

EPSILON = 1e-6


def _check_1d(name: str, t: Any, n: int | None = None) -> torch.Tensor:
    """A finite 1-d float64 tensor (float64 input keeps its precision)."""
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t, dtype=torch.float64)
    if t.dim() != 1:
        raise LearnerError(f"{name} must be a 1-d tensor, got shape {tuple(t.shape)}")
    if n is not None and t.shape[0] != n:
        raise LearnerError(f"{name} has {t.shape[0]} entries, expected {n}")
    if not torch.isfinite(t).all():
        raise LearnerError(f"{name} contains a non-finite value")
    return t.detach().to(torch.float64)


def _check_ids(name: str, ids: Sequence[Hashable], n: int) -> list[Hashable]:
    ids = list(ids.tolist() if isinstance(ids, np.ndarray | torch.Tensor) else ids)
    if len(ids) != n:
        raise LearnerError(f"{name} has {len(ids)} entries, expected {n}")
    return ids


def _check_gamma(gamma: float) -> float:
    if not 0.0 < float(gamma) <= 1.0:
        raise LearnerError(f"gamma must be in (0, 1], got {gamma}")
    return float(gamma)


def _check_eps(eps: float) -> float:
    if not (math.isfinite(float(eps)) and float(eps) >= 0.0):
        raise LearnerError(f"eps must be finite and >= 0, got {eps}")
    return float(eps)


def _normalize(x: list[float], eps: float, scale_by_std: bool) -> list[float]:
    """GRPO normalisation of one comparison set, in float64: (x - mean) / (std + eps) with the unbiased std,
    or x - mean; exactly 0 for a singleton or when std < eps (or std == 0)."""
    n = len(x)
    if n < 2:
        return [0.0] * n
    mean = math.fsum(x) / n
    dev = [v - mean for v in x]
    std = math.sqrt(math.fsum(d * d for d in dev) / (n - 1))
    if std < eps or std == 0.0:
        return [0.0] * n
    return [d / (std + eps) for d in dev] if scale_by_std else dev


def _members(ids: list[Hashable]) -> dict[Hashable, list[int]]:
    """Row indices per id, ids in order of first appearance, rows in input order."""
    out: dict[Hashable, list[int]] = {}
    for i, g in enumerate(ids):
        out.setdefault(g, []).append(i)
    return out


def group_normalize(values: torch.Tensor, group_ids: Sequence[Hashable], eps: float = EPSILON,
                    scale_by_std: bool = True) -> torch.Tensor:
    """(x - mean_g) / (std_g + eps) within each group g (unbiased std, float64; float32 out).

    Exactly 0 for a singleton group and for a group whose std is below eps."""
    x = _check_1d("values", values).tolist()
    ids = _check_ids("group_ids", group_ids, len(x))
    eps = _check_eps(eps)
    out = [0.0] * len(x)
    for rows in _members(ids).values():
        for i, a in zip(rows, _normalize([x[i] for i in rows], eps, scale_by_std), strict=True):
            out[i] = a
    return torch.tensor(out, dtype=torch.float32)


def _returns64(rewards: list[float], ids: list[Hashable], gamma: float) -> list[float]:
    out = [0.0] * len(rewards)
    running: dict[Hashable, float] = {}
    for i in range(len(ids) - 1, -1, -1):
        g = rewards[i] + gamma * running.get(ids[i], 0.0)
        running[ids[i]] = g
        out[i] = g
    return out


def turn_returns(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], gamma: float = 1.0) -> torch.Tensor:
    """G_t = r_t + gamma G_{t+1} within each trajectory; rows of a trajectory are its turns in order.

    Computed in float64, returned as float32."""
    rewards = _check_1d("turn_rewards", turn_rewards).tolist()
    ids = _check_ids("traj_ids", traj_ids, len(rewards))
    return torch.tensor(_returns64(rewards, ids, _check_gamma(gamma)), dtype=torch.float32)


def _traj_groups(traj_ids: list[Hashable], group_ids: list[Hashable]) -> None:
    seen: dict[Hashable, Hashable] = {}
    for t, g in zip(traj_ids, group_ids, strict=True):
        if seen.setdefault(t, g) != g:
            raise LearnerError(f"trajectory {t!r} has turns in two groups ({seen[t]!r} and {g!r})")


def _turn_layout(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], group_ids: Sequence[Hashable],
                 gamma: float, eps: float) -> tuple[list[float], list[Hashable], list[Hashable], float, float]:
    """Checked float64 returns, trajectory ids, group ids, gamma and eps of a per-turn batch."""
    rewards = _check_1d("turn_rewards", turn_rewards).tolist()
    tids = _check_ids("traj_ids", traj_ids, len(rewards))
    gids = _check_ids("group_ids", group_ids, len(rewards))
    _traj_groups(tids, gids)
    gamma, eps = _check_gamma(gamma), _check_eps(eps)
    return _returns64(rewards, tids, gamma), tids, gids, gamma, eps


def multi_turn_grpo(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], group_ids: Sequence[Hashable],
                    gamma: float = 1.0, eps: float = EPSILON,
                    scale_by_std: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) per turn: each turn's return-to-go normalised against the returns at the same
    turn index in the other trajectories of its group (shorter trajectories padded with their last return).

    The turn index of a row is its position among its trajectory's rows (rows of a trajectory are its turns
    in order; trajectories may interleave). Singleton groups and indices whose std is below eps get 0."""
    returns, tids, gids, _, eps = _turn_layout(turn_rewards, traj_ids, group_ids, gamma, eps)
    traj_rows = list(_members(tids).values())
    adv = [0.0] * len(returns)
    for trajs in _members([gids[rows[0]] for rows in traj_rows]).values():
        turns = [traj_rows[k] for k in trajs]
        for t in range(max(len(rows) for rows in turns)):
            column = [returns[rows[min(t, len(rows) - 1)]] for rows in turns]
            for rows, a in zip(turns, _normalize(column, eps, scale_by_std), strict=True):
                if t < len(rows):
                    adv[rows[t]] = a
    return torch.tensor(adv, dtype=torch.float32), torch.tensor(returns, dtype=torch.float32)


def outcome_grpo(scores: torch.Tensor, group_ids: Sequence[Hashable], eps: float = EPSILON,
                 scale_by_std: bool = True) -> torch.Tensor:
    """One advantage per trajectory: GRPO's outcome estimator (verl's `compute_grpo_outcome_advantage`) on its
    scalar score, in float64; 0 for singleton groups and groups whose std is below eps."""
    return group_normalize(scores, group_ids, eps, scale_by_std)


def outcome_grpo_per_turn(turn_rewards: torch.Tensor, traj_ids: Sequence[Hashable], group_ids: Sequence[Hashable],
                          gamma: float = 1.0, eps: float = EPSILON,
                          scale_by_std: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Outcome GRPO in the per-turn layout: each trajectory's discounted return from its first turn,
    normalised across trajectories of the group, copied to all its turns."""
    returns, tids, gids, _, eps = _turn_layout(turn_rewards, traj_ids, group_ids, gamma, eps)
    traj_rows = list(_members(tids).values())
    adv = [0.0] * len(returns)
    for trajs in _members([gids[rows[0]] for rows in traj_rows]).values():
        first_returns = [returns[traj_rows[k][0]] for k in trajs]
        for k, a in zip(trajs, _normalize(first_returns, eps, scale_by_std), strict=True):
            for i in traj_rows[k]:
                adv[i] = a
    return torch.tensor(adv, dtype=torch.float32), torch.tensor(returns, dtype=torch.float32)


# name -> turn-level estimator (turn_rewards, traj_ids, group_ids, gamma, eps, scale_by_std) -> (adv, returns)
TurnEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]
ESTIMATORS: dict[str, TurnEstimator] = dict(zip(ADVANTAGES, (outcome_grpo_per_turn, multi_turn_grpo), strict=True))


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
            rewards.append(float(token_level_rewards[b][turn_of[b] == k].double().sum()))
            groups.append(ids[b])
    adv_t, ret_t = estimator(torch.tensor(rewards, dtype=torch.float64), rows, groups, gamma=gamma, eps=eps,
                             scale_by_std=scale_by_std)
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
