"""Advantage estimators: formulas, the per-turn-index baseline, padding, float64 and the zero-std rule,
masks, invariances, agreement with verl, and the Stop-choice property."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch  # noqa: TID253
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.learner import (
    ESTIMATORS,
    LearnerError,
    group_normalize,
    multi_turn_grpo,
    outcome_grpo,
    turn_returns,
)
from librarian.learner.advantages import (
    EPSILON,
    get_estimator,
    outcome_grpo_per_turn,
    register_with_verl,
    token_level_estimator,
    turn_index_from_mask,
)
from librarian.rewards import returns_to_go

reward = st.floats(min_value=-5, max_value=5, allow_nan=False, width=32)
# small rewards on a grid, so that ties (equal returns along different paths) are frequent
tied_reward = st.sampled_from([-1.0, -0.5, -0.25, 0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.7, 1.0])
any_reward = st.one_of(reward, tied_reward)
SETTINGS = dict(deadline=None, derandomize=True)  # deterministic examples in CI


@st.composite
def groups(draw, min_trajs=2, max_trajs=4, max_turns=5, rewards=reward):
    """A batch: per trajectory a list of turn rewards, and its group id."""
    n_groups = draw(st.integers(1, 3))
    trajs, gids = [], []
    for g in range(n_groups):
        for _ in range(draw(st.integers(min_trajs, max_trajs))):
            trajs.append(draw(st.lists(rewards, min_size=1, max_size=max_turns)))
            gids.append(g)
    return trajs, gids


def flat(trajs, gids):
    rewards = [r for t in trajs for r in t]
    tids = [k for k, t in enumerate(trajs) for _ in t]
    g = [gids[k] for k, t in enumerate(trajs) for _ in t]
    return torch.tensor(rewards, dtype=torch.float64), tids, g


def starts(trajs):
    return [sum(len(t) for t in trajs[:k]) for k in range(len(trajs))]


def reference_multi_turn(trajs, gids, gamma=1.0, eps=EPSILON, scale_by_std=True):
    """An independent numpy version: per group a trajectories x turn-index matrix of returns, each row padded
    with its last return; column z-scores (unbiased std); 0 where a column's std is below eps or the group is
    a singleton. Returns per trajectory its advantages and the std of each of its turn indices."""
    adv, stds = [None] * len(trajs), [None] * len(trajs)
    for g in dict.fromkeys(gids):
        members = [k for k, x in enumerate(gids) if x == g]
        rets = []
        for k in members:
            r = np.array(trajs[k], dtype=np.float64)
            rets.append(np.array([sum(gamma ** j * v for j, v in enumerate(r[t:])) for t in range(len(r))]))
        width = max(len(r) for r in rets)
        m = np.array([np.concatenate([r, np.full(width - len(r), r[-1])]) for r in rets])
        mean = m.mean(axis=0)
        std = m.std(axis=0, ddof=1) if len(members) > 1 else np.zeros(width)
        a = (m - mean) / (std + eps) if scale_by_std else m - mean
        a[:, std < eps] = 0.0
        for row, k in enumerate(members):
            adv[k] = a[row, :len(rets[row])]
            stds[k] = std[:len(rets[row])]
    return adv, stds


def verl_outcome(scores, gids, eps=EPSILON, scale_by_std=True, dtype=torch.float64):
    """verl's compute_grpo_outcome_advantage on one-token responses; and the std verl uses per row."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    rewards = torch.tensor(scores, dtype=dtype).unsqueeze(1)
    index = np.empty(len(gids), dtype=object)
    index[:] = gids
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones_like(rewards), index, epsilon=eps,
                                            norm_adv_by_std_in_grpo=scale_by_std)
    std = {g: float(torch.tensor([s for s, x in zip(scores, gids, strict=True) if x == g], dtype=dtype).std())
           if gids.count(g) > 1 else math.nan for g in set(gids)}
    return adv[:, 0].double(), [std[g] for g in gids]


def naive_multi_turn(turn_rewards, traj_ids, group_ids, gamma=1.0, eps=1e-6):
    """The version the design rules out: normalise rewards per turn across the group, then sum to returns."""
    normed = group_normalize(turn_rewards, group_ids, eps)
    return turn_returns(normed, traj_ids, gamma)


def stop_choice_gap(estimator, trajs, gids, k, extra):
    """Duplicate trajectory k in its group, insert `extra` zero-reward turns before the copy's last (Stop) turn,
    and return the largest difference between the advantages the original and the copy get on their common
    turns, and between the copy's extra turns and its Stop turn."""
    base = trajs[k]
    copy = base[:-1] + [0.0] * extra + base[-1:]
    rewards, tids, g = flat(trajs + [copy], gids + [gids[k]])
    adv = estimator(rewards, tids, g)
    adv = adv[0] if isinstance(adv, tuple) else adv
    start_k = sum(len(t) for t in trajs[:k])
    start_c = sum(len(t) for t in trajs)
    orig = adv[start_k:start_k + len(base)]
    dup = adv[start_c:start_c + len(copy)]
    common = torch.cat([dup[:len(base) - 1], dup[-1:]])
    gap = float((orig - common).abs().max())
    extra_turns = dup[len(base) - 1:len(base) - 1 + extra]
    return max(gap, float((extra_turns - dup[-1]).abs().max()))


def longest_in_its_group(trajs, gids, k):
    """The index of a longest trajectory in trajectory k's group (so no other member is padded differently at
    the turn indices after k's Stop)."""
    members = [j for j, g in enumerate(gids) if g == gids[k]]
    return max(members, key=lambda j: (len(trajs[j]), -j))


# --- returns -------------------------------------------------------------------------------------------


def test_turn_returns_match_the_reward_layer_and_a_hand_computation():
    r = torch.tensor([1.0, 0.0, 2.0, 5.0, -1.0])
    got = turn_returns(r, [0, 0, 0, 1, 1], gamma=0.5)
    assert got.dtype == torch.float32
    assert got.tolist() == pytest.approx([1 + 0.5 * 0 + 0.25 * 2, 0 + 0.5 * 2, 2, 5 - 0.5, -1])
    assert got[:3].tolist() == pytest.approx(returns_to_go([1.0, 0.0, 2.0], 0.5))


@settings(**SETTINGS)
@given(st.lists(st.floats(0, 1, width=32), min_size=2, max_size=8))
def test_dense_telescoping_rewards_give_first_turn_return_equal_to_the_utility_gain(utilities):
    rewards = torch.tensor([utilities[i] - utilities[i - 1] for i in range(1, len(utilities))])
    got = turn_returns(rewards, [0] * len(rewards), 1.0)
    assert float(got[0]) == pytest.approx(utilities[-1] - utilities[0], abs=1e-5)


# --- outcome GRPO --------------------------------------------------------------------------------------


def test_outcome_grpo_is_the_group_z_score():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0])
    ids = ["a", "a", "a", "a", "b", "b"]
    got = outcome_grpo(scores, ids)
    a = scores[:4]
    b = scores[4:]
    want = torch.cat([(a - a.mean()) / (a.std() + 1e-6), (b - b.mean()) / (b.std() + 1e-6)])
    assert got.dtype == torch.float32
    assert torch.allclose(got, want)
    assert torch.allclose(outcome_grpo(scores, ids, scale_by_std=False), torch.cat([a - a.mean(), b - b.mean()]))


def test_outcome_grpo_singletons_and_tied_groups_get_exactly_zero():
    got = outcome_grpo(torch.tensor([3.0, 1.0, 1.0, 1.0, 0.7]), ["solo", "t", "t", "t", "solo2"])
    assert got.tolist() == [0.0] * 5
    assert outcome_grpo(torch.tensor([2.0, 2.0]), [0, 0], scale_by_std=False).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("scores", [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1], [1, 0, 0, 0, 0, 0, 0, 1]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tied_zero_one_scores_match_verl(scores, dtype):
    gids = [0] * len(scores)
    want, _ = verl_outcome([float(s) for s in scores], gids, dtype=dtype)
    assert torch.allclose(outcome_grpo(torch.tensor(scores, dtype=dtype), gids).double(), want, atol=1e-6)
    one_turn, _ = multi_turn_grpo(torch.tensor(scores, dtype=dtype), list(range(len(scores))), gids)
    assert torch.allclose(one_turn.double(), want, atol=1e-6)


@settings(max_examples=150, **SETTINGS)
@given(st.lists(st.tuples(any_reward, st.integers(0, 3)),
                min_size=1, max_size=16), st.booleans())
def test_one_turn_trajectories_agree_with_verl(rows, scale_by_std):
    """(d) outcome_grpo and multi_turn_grpo with one turn per trajectory are verl's GRPO, to 1e-6, wherever
    verl's group std is not below eps; there (and for singletons) ours is exactly 0."""
    scores, gids = [r for r, _ in rows], [g for _, g in rows]
    want, std = verl_outcome(scores, gids, scale_by_std=scale_by_std)
    x = torch.tensor(scores, dtype=torch.float64)
    outcome = outcome_grpo(x, gids, scale_by_std=scale_by_std).double()
    multi, returns = multi_turn_grpo(x, list(range(len(scores))), gids, scale_by_std=scale_by_std)
    per_turn, _ = outcome_grpo_per_turn(x, list(range(len(scores))), gids, scale_by_std=scale_by_std)
    assert torch.allclose(returns.double(), x.float().double())
    for i, s in enumerate(std):
        for got in (outcome[i], float(multi[i]), float(per_turn[i])):
            if math.isnan(s) or s < EPSILON:
                assert got == 0.0
            else:
                assert float(got) == pytest.approx(float(want[i]), abs=1e-6)


def test_outcome_per_turn_regression_tied_scores_summed_along_different_paths_give_zero():
    # four builds that all score 1, their per-turn rewards summing to 1 in different orders: the float32
    # version gave up to +-0.11 here (rounding noise over a std near zero); verl on the scores gives 0
    trajs = [[1.0], [0.2201639941495015, 0.5780754268345987, 0.20176057901589983],
             [0.5549287116793338, 0.028070935676543396, 0.41700035264412283],
             [0.07233005217248634, -0.47802404653212105, -0.5364242491638895, 1.9421182435235242]]
    for dtype in (torch.float32, torch.float64):
        rewards, tids, g = flat(trajs, [0] * 4)
        adv, _ = outcome_grpo_per_turn(rewards.to(dtype), tids, g)
        assert adv.tolist() == [0.0] * len(tids)


@settings(max_examples=40, **SETTINGS)
@given(groups(max_turns=3), st.floats(0.5, 1.0))
def test_outcome_per_turn_gives_one_advantage_per_trajectory(batch, gamma):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, _ = outcome_grpo_per_turn(rewards, tids, g, gamma=gamma)
    firsts = [sum(gamma ** j * r for j, r in enumerate(t)) for t in trajs]
    want = outcome_grpo(torch.tensor(firsts, dtype=torch.float64), gids)
    for k in range(len(trajs)):
        rows = [i for i, t in enumerate(tids) if t == k]
        assert torch.allclose(adv[rows], torch.full((len(rows),), float(want[k])), atol=1e-5)


# --- multi-turn GRPO: the per-turn-index baseline -------------------------------------------------------


def test_multi_turn_hand_computation_with_padding():
    # group of three: returns [3, 2, 0], [1], [2, 2]; padded columns t0 = [3, 1, 2], t1 = [2, 1, 2], t2 = [0, 1, 2]
    adv, returns = multi_turn_grpo(torch.tensor([1.0, 2.0, 0.0, 1.0, 0.0, 2.0]), [0, 0, 0, 1, 2, 2], ["q"] * 6)
    assert returns.tolist() == [3.0, 2.0, 0.0, 1.0, 2.0, 2.0]
    z = [(3 - 2) / (1 + EPSILON), (2 - 5 / 3) / (math.sqrt(1 / 3) + EPSILON), (0 - 1) / (1 + EPSILON),
         (1 - 2) / (1 + EPSILON), (2 - 2) / (1 + EPSILON), (2 - 5 / 3) / (math.sqrt(1 / 3) + EPSILON)]
    assert adv.dtype == torch.float32 and adv.tolist() == pytest.approx(z, abs=1e-6)
    drgrpo, _ = multi_turn_grpo(torch.tensor([1.0, 2.0, 0.0, 1.0, 0.0, 2.0]), [0, 0, 0, 1, 2, 2], ["q"] * 6,
                                scale_by_std=False)
    assert drgrpo.tolist() == pytest.approx([1, 1 / 3, -1, -1, 0, 1 / 3], abs=1e-6)


@settings(max_examples=80, **SETTINGS)
@given(groups(min_trajs=1, max_trajs=5, max_turns=6), st.sampled_from([1.0, 0.9, 0.5]), st.booleans())
def test_multi_turn_matches_the_padded_per_index_reference(batch, gamma, scale_by_std):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, returns = multi_turn_grpo(rewards, tids, g, gamma=gamma, scale_by_std=scale_by_std)
    want, std = reference_multi_turn(trajs, gids, gamma, scale_by_std=scale_by_std)
    assert returns.dtype == torch.float32 and adv.dtype == torch.float32
    for k, s in enumerate(starts(trajs)):
        got = adv[s:s + len(trajs[k])].double().numpy()
        clear = np.abs(std[k] - EPSILON) > 1e-9  # away from the zero-std threshold
        assert np.allclose(got[clear], want[k][clear], atol=1e-5)
        assert np.all(got[std[k] < EPSILON * 0.5] == 0.0)


@settings(max_examples=60, **SETTINGS)
@given(groups(max_trajs=6))
def test_first_turn_advantages_have_zero_mean_and_unit_std_per_group(batch):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, _ = multi_turn_grpo(rewards, tids, g)
    for gid in set(gids):
        members = [k for k, x in enumerate(gids) if x == gid]
        a = adv[[starts(trajs)[k] for k in members]].double()
        first = torch.tensor([sum(trajs[k]) for k in members], dtype=torch.float64)
        assert abs(float(a.mean())) < 1e-5
        if float(first.std()) > 1e-3:
            assert float(a.std()) == pytest.approx(1.0, rel=1e-3)


@settings(max_examples=60, **SETTINGS)
@given(groups(), st.floats(-10, 10), st.floats(0.125, 10))
def test_multi_turn_is_invariant_to_outcome_shift_and_reward_scale(batch, shift, scale):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, _ = multi_turn_grpo(rewards, tids, g)
    shifted = [t[:-1] + [t[-1] + shift] for t in trajs]  # a constant added to every terminal reward
    adv_shift, _ = multi_turn_grpo(flat(shifted, gids)[0], tids, g)
    adv_scale, _ = multi_turn_grpo(rewards * scale, tids, g)
    # an index whose returns are (near) constant has advantages ~0 either way; compare where the std is real
    _, std = reference_multi_turn(trajs, gids)
    big = torch.tensor(np.concatenate(std) > 1e-2)
    assert torch.allclose(adv_shift[big], adv[big], atol=1e-3)
    assert torch.allclose(adv_scale[big], adv[big], atol=1e-3)


# --- properties every estimator must have ---------------------------------------------------------------


@settings(max_examples=100, **SETTINGS)
@given(st.lists(any_reward, min_size=1, max_size=8),
       st.integers(1, 8), st.sampled_from(sorted(ESTIMATORS)), st.sampled_from([1.0, 0.95, 0.5]), st.booleans(),
       st.sampled_from([torch.float32, torch.float64]))
def test_identical_trajectories_get_exactly_zero_advantages(turns, size, name, gamma, scale_by_std, dtype):
    """(a) any rewards, any number of turns, any group size (1 included), every estimator."""
    trajs = [list(turns)] * size + [[1.0, -2.0]]  # a second, different group must not matter
    rewards, tids, g = flat(trajs, [0] * size + [1])
    adv, _ = get_estimator(name)(rewards.to(dtype), tids, g, gamma=gamma, scale_by_std=scale_by_std)
    assert adv[:size * len(turns)].tolist() == [0.0] * (size * len(turns))


@settings(max_examples=80, **SETTINGS)
@given(groups(min_trajs=1, max_trajs=5, rewards=any_reward),
       st.sampled_from(sorted(ESTIMATORS)), st.booleans(), st.randoms(use_true_random=False))
def test_permuting_trajectories_permutes_the_advantages(batch, name, scale_by_std, rnd):
    """(b) the order of the trajectories in a batch carries no information (exact equality: float64 statistics
    with exactly rounded sums do not depend on the order)."""
    trajs, gids = batch
    order = list(range(len(trajs)))
    rnd.shuffle(order)
    estimator = get_estimator(name)
    adv, _ = estimator(*flat(trajs, gids), scale_by_std=scale_by_std)
    padv, _ = estimator(*flat([trajs[k] for k in order], [gids[k] for k in order]), scale_by_std=scale_by_std)
    s, ps = starts(trajs), starts([trajs[k] for k in order])
    for new, old in enumerate(order):
        n = len(trajs[old])
        assert padv[ps[new]:ps[new] + n].tolist() == adv[s[old]:s[old] + n].tolist()


@settings(max_examples=100, **SETTINGS)
@given(groups(rewards=any_reward), st.integers(1, 3), st.data(),
       st.booleans())
def test_stop_neutrality_an_inserted_no_op_turn_gets_the_advantage_of_the_stop(batch, extra, data, scale_by_std):
    """(c) gamma = 1: zero-reward turns inserted before the final Stop of the longest trajectory of a group
    (so the others, padded with their last return, compare identically at those indices) get exactly the
    Stop's advantage, and the Stop keeps its advantage."""
    trajs, gids = batch
    k = longest_in_its_group(trajs, gids, data.draw(st.integers(0, len(trajs) - 1)))
    longer = trajs[k][:-1] + [0.0] * extra + trajs[k][-1:]
    new = trajs[:k] + [longer] + trajs[k + 1:]
    adv, _ = multi_turn_grpo(*flat(trajs, gids), scale_by_std=scale_by_std)
    nadv, _ = multi_turn_grpo(*flat(new, gids), scale_by_std=scale_by_std)
    n, s, ns = len(trajs[k]), starts(trajs)[k], starts(new)[k]
    stop = nadv[ns + n - 1 + extra]
    assert nadv[ns + n - 1:ns + n - 1 + extra].tolist() == [float(stop)] * extra
    assert float(stop) == pytest.approx(float(adv[s + n - 1]), abs=1e-6)
    assert nadv[ns:ns + n - 1].tolist() == pytest.approx(adv[s:s + n - 1].tolist(), abs=1e-6)
    others = [j for j in range(len(trajs)) if j != k]
    for j in others:  # nobody else's advantages move
        a, b = starts(trajs)[j], starts(new)[j]
        assert nadv[b:b + len(trajs[j])].tolist() == pytest.approx(adv[a:a + len(trajs[j])].tolist(), abs=1e-6)


@settings(max_examples=80, **SETTINGS)
@given(groups(), st.integers(1, 4), st.data())
def test_stop_choice_property_no_hidden_bonus_or_penalty_for_another_turn(batch, extra, data):
    trajs, gids = batch
    k = longest_in_its_group(trajs, gids, data.draw(st.integers(0, len(trajs) - 1)))
    assert stop_choice_gap(multi_turn_grpo, trajs, gids, k, extra) < 1e-5


def test_the_stop_choice_property_fails_for_reward_normalisation():
    # mean reward > 0: every extra turn costs -mean/std on all earlier turns under the naive scheme
    trajs, gids = [[1.0, 0.0, 2.0], [0.5, 1.5], [2.0]], [0, 0, 0]
    assert stop_choice_gap(naive_multi_turn, trajs, gids, 0, 2) > 0.5
    assert stop_choice_gap(multi_turn_grpo, trajs, gids, 0, 2) < 1e-6


# --- regressions of the all-turns baseline --------------------------------------------------------------


def test_regression_four_identical_builds_with_rewards_half_then_zero_get_zero():
    # the all-turns baseline gave +-0.935 by turn position
    adv, returns = multi_turn_grpo(torch.tensor([0.5, 0.0] * 4), [0, 0, 1, 1, 2, 2, 3, 3], ["q"] * 8)
    assert adv.tolist() == [0.0] * 8 and returns.tolist() == [0.5, 0.0] * 4


@pytest.mark.parametrize("x", [0.3, -0.01, 1.0, 1e-3, 123.456])
@pytest.mark.parametrize("size", [2, 4, 8])
def test_regression_identical_malformed_builds_get_zero(x, size):
    # the all-turns baseline gave [-1.12, 0, +1.12] to every one of these [x, 0, 0] builds
    tids = [k for k in range(size) for _ in range(3)]
    for name in ESTIMATORS:
        adv, _ = get_estimator(name)(torch.tensor([x, 0.0, 0.0] * size), tids, ["q"] * (3 * size))
        assert adv.tolist() == [0.0] * (3 * size)


def test_singleton_groups_get_zero():
    for name in ESTIMATORS:
        adv, returns = get_estimator(name)(torch.tensor([1.0, 2.0, 5.0]), [0, 0, 1], ["a", "a", "b"])
        assert adv.tolist() == [0.0, 0.0, 0.0] and returns.tolist() == [3.0, 2.0, 5.0]


# --- token layout and verl registry ---------------------------------------------------------------------


def test_turn_index_from_mask_follows_runs_of_ones():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 1, 1], [1, 0, 1, 1, 0, 0, 0, 0, 0]])
    assert turn_index_from_mask(mask).tolist() == [[0, 0, 0, 0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 1, 1, 1, 1, 1]]


@settings(max_examples=30, **SETTINGS)
@given(groups(max_turns=3), st.data())
def test_token_level_form_matches_turn_level_and_respects_the_mask(batch, data):
    trajs, gids = batch
    rows, masks = [], []
    for rs in trajs:  # one row per trajectory: prompt, then per turn 1-3 generated tokens and 0-2 tool tokens
        mask, rew = [0, 0], [0.0, 0.0]
        for r in rs:
            n_gen, n_tool = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
            mask += [1] * n_gen + [0] * n_tool
            rew += [0.0] * (n_gen - 1) + [r] + [0.0] * n_tool  # reward on the turn's last generated token
        rows.append(rew)
        masks.append(mask)
    width = max(len(m) for m in masks)
    tlr = torch.tensor([r + [0.0] * (width - len(r)) for r in rows])
    mask = torch.tensor([m + [0] * (width - len(m)) for m in masks])
    index = np.array(gids, dtype=object)
    adv, _ = token_level_estimator("multi_turn_grpo")(tlr, mask, index, config=None)
    want, _ = multi_turn_grpo(*flat(trajs, gids))
    assert torch.all(adv[mask == 0] == 0)
    turn_of = turn_index_from_mask(mask)
    at = 0
    for b, rs in enumerate(trajs):
        for k in range(len(rs)):
            vals = adv[b][(turn_of[b] == k) & (mask[b] == 1)]
            assert torch.allclose(vals, torch.full_like(vals, float(want[at])), atol=1e-5)
            at += 1


def test_estimators_are_registered_with_verl_and_found_by_name():
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    names = register_with_verl()
    assert register_with_verl() == names  # idempotent
    fn = get_adv_estimator_fn(names["multi_turn_grpo"])
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0]])
    tlr = torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0]])
    adv, ret = fn(token_level_rewards=tlr, response_mask=mask, index=np.array(["q", "q"], dtype=object),
                  config=None)
    assert ret[0].tolist() == [3.0, 3.0, 0.0, 2.0] and ret[1, 0] == 3.0
    want, _ = multi_turn_grpo(torch.tensor([1.0, 2.0, 3.0]), [0, 0, 1], ["q"] * 3)
    assert adv[0, 0] == pytest.approx(float(want[0])) and adv[1, 0] == pytest.approx(float(want[2]))
    # returns [3, 2] vs [3] (padded [3, 3]): equal at turn 0, so turn 0 gets 0; turn 1 is below the Stop
    assert adv[0, 0] == 0.0 and adv[1, 0] == 0.0 and float(adv[0, 3]) < 0


def test_bad_input_is_named():
    with pytest.raises(LearnerError, match="gamma"):
        turn_returns(torch.tensor([1.0]), [0], gamma=1.5)
    with pytest.raises(LearnerError, match="traj_ids has 1 entries"):
        multi_turn_grpo(torch.tensor([1.0, 2.0]), [0], [0, 0])
    with pytest.raises(LearnerError, match="non-finite"):
        multi_turn_grpo(torch.tensor([math.nan]), [0], [0])
    with pytest.raises(LearnerError, match="two groups"):
        multi_turn_grpo(torch.tensor([1.0, 2.0]), [0, 0], ["a", "b"])
    with pytest.raises(LearnerError, match="eps"):
        outcome_grpo(torch.tensor([1.0, 2.0]), [0, 0], eps=-1.0)
    with pytest.raises(LearnerError, match="unknown advantage estimator 'gae'"):
        get_estimator("gae")
