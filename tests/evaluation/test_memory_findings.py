"""The JAM arms: latency timed after a warm-up in a rotating order, paired differences against the full system,
and the sentences they make (a difference only when its CI excludes 0; ablations that beat the full system)."""

from __future__ import annotations

import pytest

from librarian.datasets.memorygym import MemoryGymConfig
from librarian.evaluation import memory_eval
from librarian.evaluation.memory_eval import ARMS, ResearcherEvalConfig, arm_order, evaluate_researcher
from librarian.evaluation.memory_report import arm_findings, arms_markdown
from librarian.evaluation.memory_tasks import memorygym_task
from librarian.models import make_backend


def test_every_arm_runs_first_equally_often() -> None:
    firsts = [arm_order(ARMS, b)[0] for b in range(2 * len(ARMS))]
    assert sorted(firsts) == sorted(ARMS * 2)
    assert all(sorted(arm_order(ARMS, b)) == sorted(ARMS) for b in range(7))


def test_arms_warm_up_untimed_then_take_turns(monkeypatch) -> None:
    task = memorygym_task(MemoryGymConfig(speakers=3, sessions=12, seed=5))
    calls: list[tuple[str, tuple[str, ...]]] = []
    real = memory_eval._research_batch

    def spy(arm, qs, ctx, backend, cfg):
        calls.append((arm, tuple(q.id for q in qs)))
        return real(arm, qs, ctx, backend, cfg)

    monkeypatch.setattr(memory_eval, "_research_batch", spy)
    cfg = ResearcherEvalConfig(embedder="hashing", n_boot=200, batch_size=2, warmup=1)
    result = evaluate_researcher([task], make_backend("scripted", policy="jam_researcher"), cfg, progress=False)
    asked = [q for q in task.questions if q.support]
    warm, timed = calls[:len(ARMS)], calls[len(ARMS):]
    assert warm == [(arm, (asked[0].id,)) for arm in ARMS]  # one untimed question per arm, before any timing
    batches = [timed[i:i + len(ARMS)] for i in range(0, len(timed), len(ARMS))]
    assert [[arm for arm, _ in b] for b in batches] == [arm_order(ARMS, i) for i in range(len(batches))]
    assert all(len({qs for _, qs in b}) == 1 for b in batches)  # the arms of a turn answer the same questions
    assert all(arm["n"] == len(asked) for arm in result["arms"].values())  # the warm-up is not in the figures
    diffs = result["differences"]
    assert set(diffs) == set(ARMS) - {"hierarchical"}
    for d in diffs.values():
        assert d["source_recall_ci"][0] <= d["source_recall"] <= d["source_recall_ci"][1]
        assert d["latency_s_ci"][0] <= d["latency_s"] <= d["latency_s_ci"][1]


def test_no_warm_up_is_allowed_and_a_negative_one_is_not() -> None:
    assert ResearcherEvalConfig(warmup=0).warmup == 0
    with pytest.raises(ValueError, match="warmup must be an integer >= 0"):
        ResearcherEvalConfig(warmup=-1)


def _arm(recall: float, ci: list[float]) -> dict:
    return {"source_recall": recall, "source_recall_ci": ci, "rounds_mean": 3.0, "query_latency_s_p50": 0.1, "n": 40}


def _result(hier_minus_flat: tuple[float, list[float]], no_bm25: tuple[float, list[float]]) -> dict:
    return {"arms": {"hierarchical": _arm(0.9, [0.8, 0.97]), "flat": _arm(0.85, [0.75, 0.93]),
                     "no_bm25": _arm(0.95, [0.9, 1.0])},
            "hierarchical_minus_flat": hier_minus_flat[0], "hierarchical_minus_flat_ci": hier_minus_flat[1],
            "differences": {"flat": {"source_recall": -hier_minus_flat[0],
                                     "source_recall_ci": [-hier_minus_flat[1][1], -hier_minus_flat[1][0]],
                                     "latency_s": -0.2, "latency_s_ci": [-0.3, -0.1]},
                            "no_bm25": {"source_recall": no_bm25[0], "source_recall_ci": no_bm25[1],
                                        "latency_s": 0.01, "latency_s_ci": [-0.02, 0.04]}}}


def test_no_headline_without_a_difference_and_an_ablation_that_wins_is_named() -> None:
    lines = arm_findings(_result((0.05, [-0.01, 0.11]), (0.05, [0.01, 0.09])))
    assert lines[0] == "Full system (hierarchical): source recall 0.900 (95% CI [0.800, 0.970]) on 40 questions."
    assert lines[1] == ("hierarchical vs flat: no difference shown in source recall (hierarchical - flat +0.050, "
                        "paired 95% CI [-0.010, +0.110] contains 0).")
    assert not any("beats flat" in line for line in lines)
    assert ("The ablation no_bm25 beats the full system on source recall: no_bm25 - hierarchical +0.050 "
            "(paired 95% CI [+0.010, +0.090]).") in lines
    assert "Query latency (s), flat - hierarchical: -0.200 (95% CI [-0.300, -0.100]): flat is faster than hierarchical." in lines
    assert any(line.startswith("Query latency (s), no_bm25 - hierarchical") and "no difference shown" in line
               for line in lines)


def test_a_difference_whose_interval_excludes_zero_is_the_headline() -> None:
    lines = arm_findings(_result((0.05, [0.02, 0.08]), (-0.01, [-0.04, 0.02])))
    assert lines[1] == "hierarchical beats flat on source recall: hierarchical - flat +0.050 (paired 95% CI [+0.020, +0.080])."
    assert not any("beats the full system" in line for line in lines)
    assert any(line.startswith("Source recall, no_bm25 - hierarchical: -0.010") and "no difference shown" in line
               for line in lines)


def test_arms_md_opens_with_the_findings_and_says_when_the_full_system_is_missing() -> None:
    result = _result((0.05, [-0.01, 0.11]), (0.05, [0.01, 0.09]))
    lines = arms_markdown(result).splitlines()
    assert lines[:3] == ["## What the arms show", "", f"- {arm_findings(result)[0]}"]
    assert any(line.startswith("| arm | source recall |") for line in lines)
    del result["arms"]["hierarchical"]
    assert arm_findings(result) == ["The full system (hierarchical) was not among the arms, so no arm is compared "
                                    "with it."]
