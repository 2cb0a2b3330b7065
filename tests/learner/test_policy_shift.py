"""How far a policy moved from its warm start: Delta W of LoRA checkpoints, and the KL on sampled sequences."""

from __future__ import annotations

import json

import pytest
import torch  # noqa: TID253

from librarian.learner.policy_shift import kl_on_samples, lora_deltas, trajectory_samples, weight_shift
from librarian.roles.trajectory import Trajectory, TurnRecord


def lora_state(seed: int, b_scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"m.q.lora_A.weight": torch.randn(4, 8, generator=g), "m.q.lora_B.weight": b_scale * torch.randn(6, 4, generator=g)}


def test_the_shift_is_the_change_of_delta_w_not_of_the_adapter_matrices():
    before = lora_state(0)
    assert weight_shift(before, before, 2.0)["delta_norm"] == 0.0
    # A rotated and B counter-rotated: the adapter matrices move a lot, Delta W = B A does not move at all
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))
    turned = {"m.q.lora_A.weight": q @ before["m.q.lora_A.weight"], "m.q.lora_B.weight": before["m.q.lora_B.weight"] @ q.T}
    moved = weight_shift(before, turned, 2.0)
    assert moved["delta_norm"] == pytest.approx(0.0, abs=1e-4)
    assert float((turned["m.q.lora_A.weight"] - before["m.q.lora_A.weight"]).norm()) > 1.0
    doubled = {**before, "m.q.lora_B.weight": 2 * before["m.q.lora_B.weight"]}
    out = weight_shift(before, doubled, 2.0)
    own = float(lora_deltas(before, 2.0)["m.q"].norm())
    assert out["delta_norm"] == pytest.approx(own, rel=1e-5) and out["relative"] == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(ValueError, match="different projections"):
        weight_shift(before, {"m.k.lora_A.weight": before["m.q.lora_A.weight"],
                              "m.k.lora_B.weight": before["m.q.lora_B.weight"]}, 2.0)


def test_full_weight_checkpoints_compare_the_weights_themselves():
    w = {"a": torch.ones(3), "b": torch.zeros(2)}
    out = weight_shift(w, {"a": torch.ones(3), "b": torch.tensor([3.0, 4.0])}, None)
    assert out["delta_norm"] == pytest.approx(5.0) and out["weights_norm"] == pytest.approx(3 ** 0.5)


def trajectory() -> Trajectory:
    turns = [TurnRecord(index=0, text="a", prompt_ids=(1, 2, 3), response_ids=(4, 5), logprobs=(-0.1, -0.2),
                        grammar="root ::= x"),
             TurnRecord(index=1, text="b", prompt_ids=(1, 2, 3, 4, 5, 6), response_ids=(7,), logprobs=(-0.3,))]
    return Trajectory(role="builder", task="t", budget=3, turns=turns, end="done")


def test_a_trajectory_round_trips_through_json_and_keeps_its_grammar_spans():
    traj = trajectory()
    back = Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))
    assert back.to_dict() == traj.to_dict() and back.segments() == traj.segments()
    (sample,) = trajectory_samples([back])
    assert sample.token_ids == (1, 2, 3, 4, 5, 6, 7) and sample.loss_mask == (0, 0, 0, 1, 1, 0, 1)
    assert sample.constraints == ((3, 5, "root ::= x"),)


def test_kl_is_the_mean_log_ratio_of_the_trained_policys_samples():
    samples = trajectory_samples([trajectory(), trajectory()])
    scores = {"trained": [-1.0, -2.0], "sft": [-1.5, -3.0]}
    out = kl_on_samples(lambda folder, batch: scores[folder], "trained", "sft", samples)
    assert out["kl_per_sample"] == pytest.approx(0.75) and out["kl_per_token"] == pytest.approx(1.5 / 6)
    assert out["samples"] == 2 and out["tokens"] == 6
    same = kl_on_samples(lambda folder, batch: [-1.0, -2.0], "trained", "sft", samples)
    assert same["kl_per_sample"] == 0.0
    with pytest.raises(ValueError, match="at least one sample"):
        kl_on_samples(lambda folder, batch: [], "trained", "sft", [])
