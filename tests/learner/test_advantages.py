"""Advantage estimators: formulas, group normalisation, masks, invariances, and the Stop-choice property."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.learner import LearnerError, group_normalize, multi_turn_grpo, outcome_grpo, turn_returns
from librarian.learner.advantages import (
    get_estimator,
    outcome_grpo_per_turn,
    register_with_verl,
    token_level_estimator,
    turn_index_from_mask,
)
from librarian.rewards import returns_to_go

reward = st.floats(min_value=-5, max_value=5, allow_nan=False, width=32)


@st.composite
def groups(draw, min_trajs=2, max_trajs=4, max_turns=5):
    """A batch: per trajectory a list of turn rewards, and its group id."""
    n_groups = draw(st.integers(1, 3))
    trajs, gids = [], []
    for g in range(n_groups):
        for _ in range(draw(st.integers(min_trajs, max_trajs))):
            trajs.append(draw(st.lists(reward, min_size=1, max_size=max_turns)))
            gids.append(g)
    return trajs, gids


def flat(trajs, gids):
    rewards = [r for t in trajs for r in t]
    tids = [k for k, t in enumerate(trajs) for _ in t]
    g = [gids[k] for k, t in enumerate(trajs) for _ in t]
    return torch.tensor(rewards), tids, g


def naive_multi_turn(turn_rewards, traj_ids, group_ids, gamma=1.0, eps=1e-6):
    """The version the design rules out: normalise rewards per turn across the group, then sum to returns."""
    normed = group_normalize(turn_rewards, group_ids, eps)
    return turn_returns(normed, traj_ids, gamma)


def stop_choice_gap(estimator, trajs, gids, k, extra):
    """Duplicate trajectory k in its group, insert `extra` zero-reward turns before the copy's last turn,
    and return the largest difference between the advantages the original and the copy get on their
    common turns, and between the copy's extra turns and its Stop turn."""
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


def test_turn_returns_match_the_reward_layer_and_a_hand_computation():
    r = torch.tensor([1.0, 0.0, 2.0, 5.0, -1.0])
    got = turn_returns(r, [0, 0, 0, 1, 1], gamma=0.5)
    assert got.tolist() == pytest.approx([1 + 0.5 * 0 + 0.25 * 2, 0 + 0.5 * 2, 2, 5 - 0.5, -1])
    assert got[:3].tolist() == pytest.approx(returns_to_go([1.0, 0.0, 2.0], 0.5))


@given(st.lists(st.floats(0, 1, width=32), min_size=2, max_size=8))
def test_dense_telescoping_rewards_give_first_turn_return_equal_to_the_utility_gain(utilities):
    rewards = torch.tensor([utilities[i] - utilities[i - 1] for i in range(1, len(utilities))])
    got = turn_returns(rewards, [0] * len(rewards), 1.0)
    assert float(got[0]) == pytest.approx(utilities[-1] - utilities[0], abs=1e-5)


def test_outcome_grpo_is_the_group_z_score():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0])
    ids = ["a", "a", "a", "a", "b", "b"]
    got = outcome_grpo(scores, ids)
    a = scores[:4]
    b = scores[4:]
    want = torch.cat([(a - a.mean()) / (a.std() + 1e-6), (b - b.mean()) / (b.std() + 1e-6)])
    assert torch.allclose(got, want)
    assert torch.allclose(outcome_grpo(scores, ids, scale_by_std=False), torch.cat([a - a.mean(), b - b.mean()]))


@settings(max_examples=60, deadline=None)
@given(groups())
def test_multi_turn_advantages_have_zero_mean_and_unit_std_per_group(batch):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, returns = multi_turn_grpo(rewards, tids, g)
    for gid in set(g):
        sel = torch.tensor([x == gid for x in g])
        a, r = adv[sel], returns[sel]
        if sel.sum() > 1:
            assert abs(float(a.mean())) < 1e-4
            if float(r.std()) > 1e-3:
                assert float(a.std()) == pytest.approx(1.0, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(groups(), st.floats(-10, 10), st.floats(0.125, 10))
def test_multi_turn_is_invariant_to_outcome_shift_and_reward_scale(batch, shift, scale):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, returns = multi_turn_grpo(rewards, tids, g)
    shifted = [t[:-1] + [t[-1] + shift] for t in trajs]  # a constant added to every terminal reward
    adv_shift, _ = multi_turn_grpo(flat(shifted, gids)[0], tids, g)
    adv_scale, _ = multi_turn_grpo(rewards * scale, tids, g)
    # a group whose returns are (near) constant has advantages ~0 either way; compare where the std is real
    big = torch.tensor([float(returns[torch.tensor([x == y for x in g])].std()) > 1e-2 if g.count(y) > 1
                        else False for y in g])
    assert torch.allclose(adv_shift[big], adv[big], atol=1e-3)
    assert torch.allclose(adv_scale[big], adv[big], atol=1e-3)


@settings(max_examples=80, deadline=None)
@given(groups(), st.integers(1, 4), st.data())
def test_stop_choice_property_no_hidden_bonus_or_penalty_for_another_turn(batch, extra, data):
    trajs, gids = batch
    k = data.draw(st.integers(0, len(trajs) - 1))
    assert stop_choice_gap(multi_turn_grpo, trajs, gids, k, extra) < 1e-4


def test_the_stop_choice_property_fails_for_reward_normalisation():
    # mean reward > 0: every extra turn costs -mean/std on all earlier turns under the naive scheme
    trajs, gids = [[1.0, 0.0, 2.0], [0.5, 1.5], [2.0]], [0, 0, 0]
    assert stop_choice_gap(naive_multi_turn, trajs, gids, 1, 2) > 0.5
    assert stop_choice_gap(multi_turn_grpo, trajs, gids, 1, 2) < 1e-5


@settings(max_examples=40, deadline=None)
@given(groups(max_turns=3), st.floats(0.5, 1.0))
def test_outcome_per_turn_gives_one_advantage_per_trajectory(batch, gamma):
    trajs, gids = batch
    rewards, tids, g = flat(trajs, gids)
    adv, returns = outcome_grpo_per_turn(rewards, tids, g, gamma=gamma)
    firsts = [tids.index(k) for k in range(len(trajs))]
    want = outcome_grpo(returns[firsts], gids)
    for k in range(len(trajs)):
        rows = [i for i, t in enumerate(tids) if t == k]
        assert torch.allclose(adv[rows], torch.full((len(rows),), float(want[k])), atol=1e-5)


def test_turn_index_from_mask_follows_runs_of_ones():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 1, 1], [1, 0, 1, 1, 0, 0, 0, 0, 0]])
    assert turn_index_from_mask(mask).tolist() == [[0, 0, 0, 0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 1, 1, 1, 1, 1]]


@settings(max_examples=30, deadline=None)
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


def test_bad_input_is_named():
    with pytest.raises(LearnerError, match="gamma"):
        turn_returns(torch.tensor([1.0]), [0], gamma=1.5)
    with pytest.raises(LearnerError, match="traj_ids has 1 entries"):
        multi_turn_grpo(torch.tensor([1.0, 2.0]), [0], [0, 0])
    with pytest.raises(LearnerError, match="non-finite"):
        multi_turn_grpo(torch.tensor([math.nan]), [0], [0])
    with pytest.raises(LearnerError, match="two groups"):
        multi_turn_grpo(torch.tensor([1.0, 2.0]), [0, 0], ["a", "b"])
    with pytest.raises(LearnerError, match="unknown advantage estimator 'gae'"):
        get_estimator("gae")
