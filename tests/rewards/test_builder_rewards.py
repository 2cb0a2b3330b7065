"""The builder's reward defaults (paper 000's primary run), Acc vs F1 correctness, and both terminal variants."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from librarian.config import ConfigError
from librarian.rewards import UtilityWeights
from librarian.rewards.construction import (
    ProbeService,
    RewardConfig,
    correctness,
    exam_utility,
    rollout_rewards,
    step_rewards,
)
from librarian.roles.trajectory import TurnRecord
from librarian.workspace import Document, Workspace
from librarian.workspace.snapshot import Snapshot, freeze

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _result(qid: str, f1: float, tokens: int = 100, files: int = 2):
    return SimpleNamespace(qid=qid, f1=f1, tokens_read=tokens, files_read=files)


def test_defaults_are_paper_000s_primary_run():
    cfg = RewardConfig()
    assert (cfg.every, cfg.max_probes, cfg.terminal, cfg.gamma) == (8, 4, "score", 1.0)
    assert (cfg.alpha, cfg.lambda_tok, cfg.lambda_read, cfg.correctness) == (0.0, 0.0, 0.0, "acc")
    yaml = OmegaConf.load(CONFIGS / "train_builder.yaml")
    assert {k: yaml.reward[k] for k in ("every", "max_probes", "terminal", "gamma", "alpha", "lambda_tok",
                                        "lambda_read", "correctness")} == {
        "every": 8, "max_probes": 4, "terminal": "score", "gamma": 1.0, "alpha": 0.0, "lambda_tok": 0.0,
        "lambda_read": 0.0, "correctness": "acc"}
    assert yaml.rollout.hint_every == 0  # paper 000 has no hints


def test_acc_is_full_credit_under_the_questions_metric_and_f1_stays_an_option():
    assert [correctness(s) for s in (1.0, 0.999999999999, 0.99, 0.5, 0.0)] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert correctness(0.5, "f1") == 0.5
    with pytest.raises(ValueError, match="correctness"):
        correctness(1.0, "em")
    with pytest.raises(ValueError, match="correctness"):
        RewardConfig(correctness="em").weights()


def test_exam_utility_uses_the_configured_correctness():
    results = [_result("a", 1.0), _result("b", 0.5), _result("c", 0.0)]
    assert exam_utility(results, RewardConfig().weights()) == pytest.approx(1 / 3)
    assert exam_utility(results, RewardConfig(correctness="f1").weights()) == pytest.approx(0.5)
    assert exam_utility(results, UtilityWeights()) == pytest.approx(1 / 3)  # plain weights: acc
    assert exam_utility(results, UtilityWeights(), "f1") == pytest.approx(0.5)
    # navigation costs only apply to correct answers: the 0.5-F1 answer is wrong under Acc, so costs nothing
    cfg = RewardConfig(lambda_tok=0.5, tok_scale=100.0)
    assert exam_utility(results, cfg.weights()) == pytest.approx((1 - 0.5) / 3)


def _record(turns: int, probes: dict[int, Snapshot], final: Snapshot, failed: dict[int, int] | None = None):
    traj = SimpleNamespace(turns=[TurnRecord(index=i, text="", failed_calls=(failed or {}).get(i, 0))
                                  for i in range(turns)])
    return SimpleNamespace(trajectory=traj, probes=probes, final=final, corpus_id="c0", build_costs=[1.0] * turns)


def _snapshot(name: str) -> Snapshot:
    return freeze(Workspace.from_documents([Document(name, f"the workspace {name}")]))


# the graded answers (F1) on two questions of each workspace: F_0, the probes at turns 8 and 16, and F_T
F0, P8, P16, FT = (_snapshot(n) for n in ("F0", "P8", "P16", "FT"))
ANSWERS = {F0.key: [0.0, 0.0], P8.key: [1.0, 0.5], P16.key: [1.0, 0.0], FT.key: [1.0, 1.0]}


class BatchRunner:
    """Probes (`construction.Probes`) with `run_many` that records each batch of (content hash, snapshot) it is given."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def run_many(self, snapshots, repeats=1):
        self.batches.append([key for key, _, _ in snapshots])
        return [[_result(q, f) for q, f in zip(qs, ANSWERS[key], strict=True)] for key, _, qs in snapshots]


def _service(cfg: RewardConfig) -> ProbeService:
    return ProbeService(BatchRunner(), {"c0": ["q1", "q2"]}, cfg)


@pytest.mark.parametrize("kind", ["acc", "f1"])
def test_terminal_score_adds_the_final_workspaces_correctness(kind):
    cfg = RewardConfig(correctness=kind)
    probes = _service(cfg)
    u0 = probes.utility(F0, "c0")
    rec = _record(20, {8: P8, 16: P16}, FT)
    w = rollout_rewards(rec, u0, probes, cfg)
    p8 = 0.5 if kind == "acc" else 0.75
    assert w.final == 1.0 and w.probes == {8: p8, 16: 0.5}
    expect = [0.0] * 20
    expect[7], expect[15], expect[19] = p8 - 0.0, 0.5 - p8, 1.0  # probe deltas, then + U(F_T) = Acc of F_T
    assert w.turn_rewards == pytest.approx(expect)
    assert sum(w.turn_rewards) == pytest.approx(0.5 - u0 + w.final)


def test_terminal_delta_telescopes_to_the_final_gain():
    cfg = RewardConfig(terminal="delta")
    probes = _service(cfg)
    u0 = probes.utility(F0, "c0")
    w = rollout_rewards(_record(20, {8: P8, 16: P16}, FT), u0, probes, cfg)
    expect = [0.0] * 20
    expect[7], expect[15], expect[19] = 0.5, 0.0, 0.5
    assert w.turn_rewards == pytest.approx(expect)
    assert math.isclose(sum(w.turn_rewards), w.final - u0) and math.isclose(w.sparse, w.final)


def test_under_delta_a_build_that_changes_nothing_earns_exactly_zero_and_a_failed_call_less():
    cfg = RewardConfig(terminal="delta", every=1, failed_call_cost=0.1)
    probes = _service(cfg)
    u0 = probes.utility(F0, "c0")
    nothing = rollout_rewards(_record(3, {1: F0, 2: F0, 3: F0}, F0), u0, probes, cfg)
    assert sum(nothing.turn_rewards) == 0.0 and nothing.sparse == 0.0 - 0.0 + u0  # U(F_T) = U(F_0), no cost
    failed = rollout_rewards(_record(3, {1: F0, 2: F0, 3: F0}, F0, failed={1: 1}), u0, probes, cfg)
    assert failed.turn_rewards == pytest.approx([0.0, -0.1, 0.0])  # the turn of the failed call pays for it
    assert sum(failed.turn_rewards) < sum(nothing.turn_rewards) and failed.sparse == pytest.approx(u0 - 0.1)
    free = rollout_rewards(_record(3, {1: F0, 2: F0, 3: F0}, F0, failed={1: 1}), u0, probes,
                           RewardConfig(terminal="delta", every=1))
    assert sum(free.turn_rewards) == 0.0  # paper 000's default: a failed call ties with doing nothing
    with pytest.raises(ConfigError, match="failed_call_cost"):
        RewardConfig(failed_call_cost=-1.0)


def test_a_steps_distinct_snapshots_are_probed_in_one_batch_with_the_same_rewards():
    cfg = RewardConfig(terminal="delta")
    records = [_record(20, {8: P8, 16: P16}, FT), _record(20, {8: P8}, FT), _record(12, {}, P16)]
    one_by_one = [rollout_rewards(r, 0.0, _service(cfg), cfg) for r in records]
    runner = BatchRunner()
    probes = ProbeService(runner, {"c0": ["q1", "q2"]}, cfg)
    assert step_rewards(records, {"c0": 0.0}, probes, cfg) == one_by_one
    assert len(runner.batches) == 1 and len(runner.batches[0]) == len(set(runner.batches[0])) == 3  # P8 P16 FT
    assert probes.probes_run == 3
    step_rewards(records, {"c0": 0.0}, probes, cfg)
    assert len(runner.batches) == 1  # all cached: nothing probed again
    assert probes.utilities([(F0, "c0"), (FT, "c0"), (F0, "c0")]) == [0.0, 1.0, 0.0]
    assert len(runner.batches) == 2 and len(runner.batches[1]) == 1  # only F_0 was new, and sent once
