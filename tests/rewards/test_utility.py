"""Paper 000's utility, sparse and dense rewards (telescoping), the probe schedule, source recall."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.rewards import (
    ProbeSchedule,
    RewardError,
    RolloutOutcome,
    UtilityWeights,
    dense_rewards,
    discounted_return,
    probe_rewards,
    returns_to_go,
    source_precision,
    source_recall,
    sparse_reward,
    utility,
)

finite = st.floats(-10, 10, allow_nan=False)
cost = st.floats(0, 5, allow_nan=False)


def test_utility_costs_count_only_on_correct_rollouts():
    outs = [RolloutOutcome("a", 1.0, tokens=100, reads=4), RolloutOutcome("a", 0.0, tokens=900, reads=30),
            RolloutOutcome("b", 1.0, tokens=300, reads=2)]
    u = utility(outs, UtilityWeights(lambda_tok=0.1, lambda_read=0.05, tok_scale=1000, read_scale=10))
    # question a: S=0.5, C_tok=(0.1+0)/2, C_read=(0.4+0)/2; question b: S=1, C_tok=0.3, C_read=0.2
    assert u.success == pytest.approx(0.75)
    assert u.tok_cost == pytest.approx((0.05 + 0.3) / 2)
    assert u.read_cost == pytest.approx((0.2 + 0.2) / 2)
    assert u.utility == pytest.approx(0.75 - 0.1 * 0.175 - 0.05 * 0.2)
    assert (u.questions, u.rollouts) == (2, 3)


def test_utility_is_accuracy_without_penalties():
    outs = [RolloutOutcome("a", 1.0, tokens=1e6), RolloutOutcome("b", 0.0)]
    assert utility(outs).utility == 0.5


@pytest.mark.parametrize(("kwargs", "msg"), [({"lambda_tok": -1}, "lambda_tok"), ({"tok_scale": 0}, "tok_scale")])
def test_bad_weights(kwargs, msg):
    with pytest.raises(RewardError, match=msg):
        UtilityWeights(**kwargs)


def test_bad_outcomes():
    with pytest.raises(RewardError, match="at least one"):
        utility([])
    with pytest.raises(RewardError, match=r"\[0, 1\]"):
        utility([RolloutOutcome("a", 1.5)])
    with pytest.raises(RewardError, match=">= 0"):
        utility([RolloutOutcome("a", 1.0, tokens=-1)])


@settings(deadline=None)
@given(st.lists(finite, min_size=1, max_size=12), st.data(), st.floats(0, 2, allow_nan=False))
def test_telescoping_identity_eq4(us, data, alpha):
    costs = data.draw(st.lists(cost, min_size=len(us) - 1, max_size=len(us) - 1))
    rewards = dense_rewards(us, costs, alpha=alpha)
    assert len(rewards) == len(us) - 1
    assert sum(rewards) == pytest.approx(sparse_reward(us[-1], costs, alpha) - us[0], abs=1e-9)


@settings(deadline=None)
@given(st.lists(finite, min_size=1, max_size=12), st.data(), st.floats(0.05, 1.0), st.floats(0, 2))
def test_shaped_rewards_telescope_with_discount(us, data, gamma, alpha):
    costs = data.draw(st.lists(cost, min_size=len(us) - 1, max_size=len(us) - 1))
    rewards = dense_rewards(us, costs, alpha=alpha, gamma=gamma)
    t = len(us) - 1
    expected = gamma ** t * us[-1] - us[0] - alpha * sum(gamma ** i * c for i, c in enumerate(costs))
    assert discounted_return(rewards, gamma) == pytest.approx(expected, abs=1e-9)


def test_dense_reward_validation():
    with pytest.raises(RewardError, match="build costs"):
        dense_rewards([0.0, 1.0], [1.0, 2.0])
    with pytest.raises(RewardError, match="gamma"):
        dense_rewards([0.0, 1.0], gamma=0.0)
    with pytest.raises(RewardError, match="alpha"):
        sparse_reward(1.0, [1.0], alpha=-0.1)


def test_returns_to_go():
    assert returns_to_go([1.0, 0.0, 2.0], gamma=0.5) == [1.5, 1.0, 2.0]
    assert returns_to_go([1.0, 2.0])[0] == discounted_return([1.0, 2.0])


def test_probe_schedule_paper_default():
    sched = ProbeSchedule()
    assert sched.probe_turns(32) == [8, 16, 24, 32]
    assert sched.probe_turns(60) == [8, 16, 24, 32]  # at most 4
    assert ProbeSchedule(every=4, max_probes=10, min_turn=10).probe_turns(20) == [12, 16, 20]
    assert ProbeSchedule(every=2, repeats=3).repeats == 3


def test_probe_schedule_maturity():
    sched = ProbeSchedule(every=2, min_synthetic=3)
    assert not sched.should_probe(2, 0, synthetic=2)
    assert sched.should_probe(4, 0, synthetic=3)
    with pytest.raises(RewardError, match="synthetic"):
        sched.should_probe(2, 0)
    with pytest.raises(RewardError, match="every"):
        ProbeSchedule(every=0)
    with pytest.raises(RewardError, match="from 1"):
        sched.should_probe(0, 0, synthetic=5)


def test_probe_rewards_deltas_at_probe_turns_and_terminal_score():
    r = probe_rewards(10, 0.2, {4: 0.5, 8: 0.4}, final=0.6)
    assert r == pytest.approx([0, 0, 0, 0.3, 0, 0, 0, -0.1, 0, 0.6])
    r = probe_rewards(10, 0.2, {4: 0.5, 8: 0.4}, final=0.6, terminal="delta")
    assert r[-1] == pytest.approx(0.2) and sum(r) == pytest.approx(0.6 - 0.2)
    assert probe_rewards(3, 0.0, {}, terminal="none") == [0.0, 0.0, 0.0]


@settings(deadline=None)
@given(st.integers(1, 40), finite, finite, st.data(), st.floats(0.1, 1.0), st.floats(0, 1))
def test_probe_rewards_telescope(turns, u0, final, data, gamma, alpha):
    sched = ProbeSchedule(every=data.draw(st.integers(1, 9)), max_probes=data.draw(st.integers(0, 5)))
    probes = {t: data.draw(finite) for t in sched.probe_turns(turns)}
    costs = data.draw(st.lists(cost, min_size=turns, max_size=turns))
    r = probe_rewards(turns, u0, probes, final, build_costs=costs, alpha=alpha, gamma=gamma, terminal="delta")
    expected = gamma ** turns * final - u0 - alpha * sum(gamma ** i * c for i, c in enumerate(costs))
    assert discounted_return(r, gamma) == pytest.approx(expected, abs=1e-8)
    if gamma == 1.0 and alpha == 0:  # no reward between probes
        assert all(r[t - 1] == 0 for t in range(1, turns) if t not in probes)


def test_probe_reward_errors():
    with pytest.raises(RewardError, match="outside"):
        probe_rewards(4, 0.0, {5: 1.0}, final=1.0)
    with pytest.raises(RewardError, match="final"):
        probe_rewards(4, 0.0, {})
    with pytest.raises(RewardError, match="terminal"):
        probe_rewards(4, 0.0, {}, final=1.0, terminal="sum")  # type: ignore[arg-type]


def test_source_recall():
    assert source_recall(["s1", "s2", "s2", "x"], ["s1", "s2", "s3"]) == pytest.approx(2 / 3)
    assert source_recall([], ["s1"]) == 0.0
    assert source_precision(["s1", "x"], ["s1"]) == 0.5 and source_precision([], ["s1"]) == 0.0
    with pytest.raises(ValueError, match="non-empty gold"):
        source_recall(["a"], [])


@settings(deadline=None)
@given(st.sets(st.sampled_from("abcdefgh")), st.sets(st.sampled_from("abcdefgh"), min_size=1))
def test_source_recall_bounds(got, gold):
    r = source_recall(got, gold)
    assert 0.0 <= r <= 1.0
    assert (r == 1.0) == gold.issubset(got)
    assert math.isclose(source_recall(got | gold, gold), 1.0)
