"""The builder's per-step and exam figures: valid-call rate, groups with signal, utilities and paired CIs."""

from __future__ import annotations

from librarian.cluster.builder_jobs import RolloutRecord
from librarian.learner import LearnerConfig
from librarian.pipelines.builder.exam import utility_figures
from librarian.pipelines.builder.steps import sft_verified
from librarian.rewards.construction import RolloutRewards
from librarian.rl.samples import nonzero_group_fraction, policy_samples, valid_call_rate
from librarian.rl.task import Scored
from librarian.roles.trajectory import Trajectory, TurnRecord


def _turn(i: int, calls: int, errors: int, tokens: bool = True) -> TurnRecord:
    return TurnRecord(index=i, text="t", calls=[{"name": "stop", "arguments": {}}] * calls,
                      errors=[{"kind": "bad_json", "message": "x"}] * errors,
                      prompt_ids=(1, 2) if tokens else (), response_ids=(3,) if tokens else ())


def test_valid_call_rate_counts_policy_turns_with_calls_and_no_errors():
    a = Trajectory("builder", "t", 4, turns=[_turn(0, 1, 0), _turn(1, 0, 1), _turn(2, 1, 1)])
    b = Trajectory("builder", "t", 4, turns=[_turn(0, 1, 0), _turn(1, 1, 0, tokens=False)])  # scripted turn: skipped
    assert valid_call_rate([a, b]) == 2 / 4
    assert valid_call_rate([]) == 0.0


def test_nonzero_group_fraction():
    assert nonzero_group_fraction([0.0, 0.0, 0.5, -0.5], ["a", "a", "b", "b"]) == 0.5
    assert nonzero_group_fraction([1e-12, 0.0], ["a", "a"]) == 0.0
    assert nonzero_group_fraction([], []) == 0.0


def test_utility_figures_give_means_cis_and_paired_differences():
    per_question = {"flat": [0.0, 1.0, 0.0, 1.0] * 5, "scripted_builder": [1.0, 1.0, 1.0, 1.0] * 5,
                    "trained_builder": [0.0, 1.0, 0.0, 1.0] * 5, "untrained_builder": [0.0, 1.0, 0.0, 1.0] * 5}
    fig = utility_figures(per_question, n_boot=500, seed=0)
    assert fig["utilities"]["flat"]["mean"] == 0.5 and fig["utilities"]["scripted_builder"]["n"] == 20
    scripted = fig["differences"]["scripted_builder-flat"]
    assert scripted["mean"] == 0.5 and scripted["ci"][0] > 0
    same = fig["differences"]["trained_builder-untrained_builder"]
    assert same["mean"] == 0.0 and same["ci"] == [0.0, 0.0]
    assert "trained_builder-sft_builder" not in fig["differences"]  # no sft stage examined


def test_filtering_flat_groups_keeps_the_other_groups_samples_and_advantages_unchanged():
    def record(job: str, i: int) -> RolloutRecord:
        traj = Trajectory("builder", "t", 2, turns=[_turn(0, 1, 0), _turn(1, 1, 0)])
        return RolloutRecord(job, "c0", i, traj, 0, {}, b"", [1.0, 1.0], 0)

    def rewards(final: float) -> RolloutRewards:
        return RolloutRewards([0.0, final], 0.0, {}, final, final)

    jobs = [("flat", 1.0), ("flat", 1.0), ("moves", 1.0), ("moves", 0.0), ("also_flat", 0.0), ("also_flat", 0.0)]
    details = [rewards(r) for _, r in jobs]
    scored = Scored([record(j, i) for i, (j, _) in enumerate(jobs)], [w.turn_rewards for w in details], details)
    every, figures = policy_samples(scored, LearnerConfig(advantage="multi_turn_grpo"))
    filtering = LearnerConfig(advantage="multi_turn_grpo", filter_flat_groups=True)
    kept, kept_figures = policy_samples(scored, filtering)
    assert len(every) == 12 and len(kept) == 4  # a sample a turn (the prompts do not pack); "moves" is left
    assert [s.advantages for s in kept] == [s.advantages for s in every[4:8]]
    assert any(a != 0 for s in kept for a in s.advantages)
    assert figures["nonzero_advantage_fraction"] == kept_figures["nonzero_advantage_fraction"] == 1 / 3
    assert kept_figures["flat_groups_dropped"] == 2.0 and "flat_groups_dropped" not in figures
    assert policy_samples(scored.subset([0, 1]), filtering)[0] == []


def test_sft_keeps_teacher_builds_that_stopped_or_spent_their_budget_on_a_gain():
    assert sft_verified("done", 0.0, 0.0) and sft_verified("done", 0.5, 0.0)
    assert sft_verified("budget", 1.0, 0.0) and not sft_verified("budget", 0.0, 0.0)
    assert not sft_verified("done", -0.1, 0.0) and not sft_verified("done", 0.2, 0.5)
    assert not sft_verified("budget", 0.2, 0.5) and not sft_verified("error", 1.0, 0.0)
