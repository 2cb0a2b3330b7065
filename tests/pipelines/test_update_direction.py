"""benchmarks/update_direction.py on a tiny random model: one update per learning rate from a saved SFT policy."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("update_direction", ROOT / "benchmarks" / "update_direction.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    return bench


def test_one_update_per_rate_is_measured_and_a_zero_rate_moves_nothing(tmp_path, capsys):
    bench = _bench()
    overrides = ["rollout.options={model: tiny}", "rollout.budget=2", "rollout.max_new_tokens=96",
                 "sft.epochs=1", "sft.corpora=2", "sft.budget=2", "data.train_corpora=2", "learner.lora.rank=4",
                 "learner.lora.publish=merged"]  # the worker's model takes merged weights: learners must not copy it
    out = tmp_path / "ud"
    assert bench.main(["--out", str(out), "--group-size", "2", *overrides, "--lrs", "0", "1e-2"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert (out / "update_direction.png").is_file() and (out / "sft" / "learner.json").is_file()
    assert set(res["groups"]) == {"trained", "held_out"}
    assert res["groups"]["trained"]["corpus"] != res["groups"]["held_out"]["corpus"]
    for g in res["groups"].values():
        assert len(g["before"]) == len(g["signs"]) >= 2  # every segment of the group's 2 builds
        assert all(math.isfinite(x) and x < 0 for x in g["before"])
    (zero,), (moved,) = res["controls"], res["updates"]
    assert zero["lr"] == 0 and moved["lr"] == 1e-2
    assert zero["trained_changes"] == [0.0] * len(zero["trained_changes"])
    assert zero["held_out_changes"] == [0.0] * len(zero["held_out_changes"])
    assert "SFT on" in capsys.readouterr().out
    # a second run reuses the saved SFT policy
    assert bench.main(["--out", str(out), "--group-size", "2", *overrides, "--lrs", "0"]) == 0
    assert "SFT on" not in capsys.readouterr().out


def test_mean_by_sign_picks_the_builds_of_one_sign():
    bench = _bench()
    assert bench.mean_by_sign([1.0, -2.0, 3.0], [1, -1, 1], 1) == pytest.approx(2.0)
    assert bench.mean_by_sign([1.0, -2.0, 3.0], [1, -1, 1], -1) == pytest.approx(-2.0)
    assert bench.mean_by_sign([1.0], [0], 1) is None


def test_a_control_that_moved_stops_the_run():
    bench = _bench()
    bench.check_control({"lr": 0.0, "trained_changes": [0.0, 5e-4], "held_out_changes": [-5e-4]})
    with pytest.raises(SystemExit, match="lr 0 moved a build's log-prob by 2.0000"):
        bench.check_control({"lr": 0.0, "trained_changes": [0.0], "held_out_changes": [-2.0]})
