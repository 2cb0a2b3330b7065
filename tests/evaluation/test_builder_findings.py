"""What a builder run can and cannot show, as sentences computed from its figures (never canned)."""

from __future__ import annotations

from librarian.evaluation.builder_findings import pair_verdict, run_findings
from librarian.evaluation.findings import difference, no_signal_steps

from .builder_results import builder_results


def _has(findings: list[str], *parts: str) -> str:
    hits = [f for f in findings if all(p in f for p in parts)]
    assert hits, f"no finding holds {parts}: {findings}"
    return hits[0]


def test_a_saturated_exam_and_a_builder_that_built_nothing_are_said_first() -> None:
    findings = run_findings(builder_results(flat_f1=1.0, trained_same_as_flat=True))
    assert findings[0] == "This run cannot show a trained builder that helps: the trained builder built nothing."
    _has(findings, "The exam is saturated", "F1 1.000", "only reading costs")
    _has(findings, "The trained builder built nothing", "all 2 exam corpora", "not parity")
    _has(findings, "the trained builder - the flat store: 0 by construction")
    assert not any("parity with the scripted builder" in f for f in findings)


def test_a_saturated_exam_where_the_builder_built_something() -> None:
    findings = run_findings(builder_results(flat_f1=1.0, trained_same_as_flat=False,
                                            trained_minus_flat=(0.004, -0.01, 0.02)))
    assert findings[0].startswith("This run cannot show a builder that raises correctness: the exam is saturated")
    assert "+0.004 (95% CI [-0.010, +0.020])" in findings[0]
    assert not any("built nothing" in f for f in findings)
    _has(findings, "the trained builder - the flat store: +0.004", "no difference shown")


def test_room_to_improve_and_a_difference_whose_interval_excludes_zero() -> None:
    findings = run_findings(builder_results(flat_f1=0.5, trained_same_as_flat=False,
                                            trained_minus_flat=(0.1, 0.05, 0.15)))
    assert findings[0].startswith("The trained builder's stores raise exam utility over the flat store: "
                                  "trained - flat exam utility +0.100 (95% CI [+0.050, +0.150])")
    assert "no control ran" in findings[0]
    _has(findings, "The flat store scores F1 0.500")
    assert not any("saturated" in f for f in findings)
    _has(findings, "the trained builder - the flat store: +0.100", "the trained builder is higher than the flat store")


def test_sft_size_signal_and_control_are_stated() -> None:
    findings = run_findings(builder_results(no_signal_steps=(0, 2)))
    _has(findings, "SFT warm start: 1 of 2 scripted teacher builds verified", "4 updates",
         "SFT loss 1.900 before, 1.200 after")
    _has(findings, "2 steps of 3 (step 0, 2) had no group", "loss was 0 by construction")
    _has(findings, "No control ran")
    quiet = run_findings(builder_results(no_signal_steps=()))
    assert not any("had no group" in f for f in quiet)


def test_a_control_run_is_reported_with_its_interval() -> None:
    findings = run_findings(builder_results(control={"gain_over_control": 0.19, "gain_over_control_ci": [0.02, 0.34]}))
    _has(findings, "Control (learner.lr=0): reward gain over it +0.190 (95% CI [+0.020, +0.340])",
         "the run's reward is higher")
    assert not any("No control ran" in f for f in findings)
    itself = run_findings(builder_results(lr=0.0))
    _has(itself, "learner.lr=0: no update was made; this run is a control.")


def test_sft_that_kept_nothing_and_no_exam() -> None:
    results = builder_results()
    results["sft"] = {"teacher_builds": 2, "verified": 0, "samples": 0, "sft_steps": 0}
    results["rows"], results["exam"] = [], {}
    findings = run_findings(results)
    assert findings[0].startswith("This run trained the builder but examined nothing")
    _has(findings, "0 of 2 scripted teacher builds verified", "no update was made")


def test_helpers_follow_the_interval() -> None:
    assert difference("U", "a", "b", -0.2, [-0.3, -0.1]).endswith("a is lower than b.")
    assert "no difference shown" in difference("U", "a", "b", 0.2, [-0.1, 0.5])
    exam = builder_results(trained_same_as_flat=False)["exam"]
    assert pair_verdict(exam, "trained_builder-flat", [0.01, 0.02]) == "a higher"
    assert pair_verdict(builder_results()["exam"], "trained_builder-flat", [0.0, 0.0]).startswith("0 by construction")
    assert no_signal_steps([{"step": 0.0, "nonzero_advantage_fraction": 0.0}, {"step": 1.0}]) == [0]
