"""`learning_verdict`: a within-run gain reads as learning only when the control's does not and the run beats it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from librarian.evaluation.learning_curves import learning_verdict


def test_a_gain_the_control_shows_too_is_not_learning():
    # the powered builder preset, seed 0: both runs gained on the same (easier) late corpora
    text = learning_verdict([0.29, 1.08], [0.04, 1.00], [-0.20, 0.05])
    assert text.startswith("not shown") and "control gains too" in text and "-0.200" in text


def test_each_way_to_fail_is_named_and_only_all_three_pass():
    assert "holds 0" in learning_verdict([-0.1, 0.4], [-0.2, 0.2], [0.1, 0.3])
    assert "control falls" in learning_verdict([0.1, 0.4], [-0.5, -0.1], [0.1, 0.3])
    assert "does not beat the control" in learning_verdict([0.1, 0.4], [-0.2, 0.2], [-0.05, 0.3])
    assert "no paired comparison" in learning_verdict([0.1, 0.4], [-0.2, 0.2], None)
    assert learning_verdict([0.1, 0.4], [-0.2, 0.2], [0.02, 0.3]).startswith("learns")


interval = st.tuples(st.floats(-2, 2), st.floats(0, 2)).map(lambda t: [t[0], t[0] + t[1]])


@given(interval, interval, interval)
def test_learns_exactly_when_all_three_cis_say_so(gain, control, over):
    expected = gain[0] > 0 and control[0] <= 0 <= control[1] and over[0] > 0
    assert learning_verdict(gain, control, over).startswith("learns") == expected
