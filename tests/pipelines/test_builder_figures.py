"""The builder's per-step and exam figures: valid-call rate, groups with signal, utilities and paired CIs."""

from __future__ import annotations

from librarian.pipelines.builder_exam import utility_figures
from librarian.pipelines.builder_steps import nonzero_group_fraction, valid_call_rate
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
