"""`librarian ablate` beyond a grid, on a real local Ray Tune: random and Optuna search over ranges, ASHA
stopping poor trials on the per-step reward a pipeline logs through its Tracker, retries, timeouts, and a
sweep killed half-way then run again. The pipeline is `toy` below (`module:function`), a few steps of a
reward that grows with `lr`, so each trial costs about a second of work plus Ray's start-up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from librarian.cluster.tune_sweep import read_attempts
from librarian.config import ConfigError
from librarian.pipelines.ablate import config as ac
from librarian.pipelines.ablate import search as srch
from librarian.pipelines.ablate.sweep import run
from librarian.tracking import Tracker

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.pipelines.test_ablate_search:toy"


@dataclass
class ToyConfig:
    """A pipeline small enough for tests: `steps` rewards of `lr * (step + 1)`, logged per step."""

    out_dir: str = "build/toy"
    seed: int = 0
    steps: int = 3
    lr: float = 0.1
    step_s: float = 0.0  # sleep per step
    fail_times: int = 0  # the first fail_times attempts raise
    experiment: str = "toy"
    tracking_uri: str = ""


def toy(cfg: ToyConfig) -> dict:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "attempts"
    runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
    if len(runs.read_text()) <= cfg.fail_times:
        raise RuntimeError(f"planned failure {len(runs.read_text())}")
    history = []
    with Tracker(cfg.experiment, out, cfg.tracking_uri or None) as tracker:
        for step in range(cfg.steps):
            history.append({"reward": cfg.lr * (step + 1), "step": step})
            tracker.log_metrics({"reward": history[-1]["reward"]}, step)
            time.sleep(cfg.step_s)
    return {"reward": history[-1]["reward"], "history": history, "lr": cfg.lr}


def sweep(out: Path, *args: str) -> dict:
    return run(ac.load([f"pipeline={TOY}", f"out_dir={out}", "n_boot=100", *args]))


# --- the search space (pure) --------------------------------------------------------------------------------
def test_space_becomes_tune_domains_and_samples_in_range():
    space = {"learner.lr": {"loguniform": [1e-6, 1e-4]}, "reward": {"gamma": {"choice": [0.9, 1.0]}}}
    flat = srch.flatten_space(space)
    assert flat == {"learner.lr": ("loguniform", [1e-6, 1e-4]), "reward.gamma": ("choice", [0.9, 1.0])}
    for seed in range(20):
        drawn = srch.sample(space, seed)
        assert 1e-6 <= drawn["learner.lr"] <= 1e-4 and drawn["reward.gamma"] in (0.9, 1.0)
        assert type(drawn["learner.lr"]) is float  # plain Python, renders as YAML
    assert srch.sample(space, 3) == srch.sample(space, 3)


@pytest.mark.parametrize(("space", "match"), [
    ({"lr": [1, 2]}, r"space.lr: needs one distribution"),
    ({"lr": {"logunif": [1, 2]}}, r"space.lr: one of uniform"),
    ({"lr": {"uniform": [0, 1], "choice": [1]}}, r"space.lr: one of uniform"),
    ({"lr": {"uniform": 3}}, r"space.lr.uniform: needs a list"),
    ({"lr": {"loguniform": [0, 1]}}, r"space.lr: loguniform\[0, 1\] is not a valid range"),
])
def test_bad_spaces_are_named(space, match):
    with pytest.raises(ConfigError, match=match):
        srch.domains(space)


@pytest.mark.parametrize(("args", "match"), [
    (["search=random"], "samples `space`"),
    (["space={lr: {uniform: [0, 1]}}"], "need search: random or optuna"),
    (["num_samples=4"], "need search: random or optuna"),
    (["search=optuna", "space={lr: {uniform: [0, 1]}}", "grid={seed: [1, 2]}"], "optuna samples one base cell"),
    (["search=bayes"], "search must be one of grid, random, optuna"),
    (["scheduler=hyperband"], "scheduler must be one of fifo, asha"),
    (["objective.mode=up"], "objective.mode must be one of max, min"),
    (["asha.reduction_factor=1"], "asha needs"),
    (["cells=[{name: a, resources: {hold: true}}]"], r"unknown resources field\(s\) \['hold'\]"),
])
def test_bad_search_settings_are_named(args, match):
    with pytest.raises(ConfigError, match=match):
        ac.sweep_cells(ac.load([f"pipeline={TOY}", *args]))


def test_trial_cells_are_named_after_their_cell_and_trial():
    cell = {"name": "base", "group": "base", "overrides": {"steps": 2}}
    assert srch.trial_cell({"cell": cell}, "abc_00003") == ("base", "base", {"steps": 2})
    assert srch.trial_cell({"cell": cell, "space": {"lr": 0.5}}, "abc_00003") == (
        "base-00003", "base-00003", {"steps": 2, "lr": 0.5})
    assert srch.trial_cell({"cell": cell, "space": {"lr": 0.5}}, "9f8e7d6c")[0] == "base-9f8e7d6c"  # optuna ids


# --- on Ray Tune ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_random_search_under_asha_stops_poor_trials_early(ray_session, tmp_path):
    res = sweep(tmp_path / "asha", "search=random", "num_samples=8", "space={lr: {loguniform: [0.01, 1.0]}}",
                "scheduler=asha", "asha={grace_period: 1, reduction_factor: 2, max_t: 4}", "base.overrides={steps: 4}",
                "metrics=[reward]", "max_concurrent=2")
    cells = res["cells"]
    assert len(cells) == 8 and len({c["name"] for c in cells}) == 8
    assert all(0.01 <= c["overrides"]["lr"] <= 1.0 for c in cells)
    status = [c["status"] for c in cells]
    assert set(status) <= {"finished", "early_stopped"} and status.count("early_stopped") >= 2
    assert res["counts"]["early_stopped"] == status.count("early_stopped")
    for c in cells:
        if c["status"] == "early_stopped":  # stopped at a rung, before its last step, so no results of its own
            assert 1 <= c["iterations"] <= 4 and "reward" not in c["metrics"]
            assert not (tmp_path / "asha" / "cells" / c["name"] / "results.json").exists()
        else:
            assert c["metrics"]["reward"] == pytest.approx(4 * c["overrides"]["lr"])
            assert c["metrics"]["last.reward"] == pytest.approx(4 * c["overrides"]["lr"])
    best = max(cells, key=lambda c: c["overrides"]["lr"])
    assert best["status"] == "finished"  # the highest reward at every rung is never stopped
    saved = json.loads((tmp_path / "asha" / "results.json").read_text())
    assert [c["status"] for c in saved["cells"]] == status and saved["tune"]["scheduler"] == "asha"
    from ray.tune import ExperimentAnalysis  # Tune's own tools read the same experiment

    analysis = ExperimentAnalysis(res["tune"]["experiment"])
    assert len(analysis.trials) == 8


@pytest.mark.slow
def test_optuna_search_samples_the_space(ray_session, tmp_path):
    res = sweep(tmp_path / "optuna", "search=optuna", "num_samples=2", "space={lr: {uniform: [0.1, 0.9]}}",
                "objective={metric: reward, mode: max}", "metrics=[reward]")
    cells = res["cells"]
    assert [c["status"] for c in cells] == ["finished"] * 2
    lrs = [c["overrides"]["lr"] for c in cells]
    assert len(set(lrs)) == 2 and all(0.1 <= x <= 0.9 for x in lrs)
    for c in cells:
        assert c["metrics"]["reward"] == pytest.approx(3 * c["overrides"]["lr"])


@pytest.mark.slow
def test_retries_and_failures_are_reported(ray_session, tmp_path):
    cells = "cells=[{name: ok}, {name: twice, overrides: {fail_times: 2}}, {name: always, overrides: {fail_times: 99}}]"
    res = sweep(tmp_path / "retry", cells, "retries=2", "metrics=[reward]")  # timeouts: tests/cluster/test_sweep.py
    by = {c["name"]: c for c in res["cells"]}
    assert list(by) == ["ok", "twice", "always"]
    assert by["ok"]["status"] == "finished" and by["ok"]["attempts"] == 1 and "errors" not in by["ok"]
    assert by["twice"]["status"] == "finished" and by["twice"]["attempts"] == 3
    assert by["twice"]["errors"] == ["attempt 1: RuntimeError: planned failure 1",
                                     "attempt 2: RuntimeError: planned failure 2"]
    assert by["twice"]["metrics"]["reward"] == pytest.approx(0.3)
    assert by["always"]["status"] == "failed" and by["always"]["attempts"] == 3
    assert by["always"]["error"] == "RuntimeError: planned failure 3" and by["always"]["metrics"] == {}
    assert res["counts"] == {"finished": 2, "failed": 1, "early_stopped": 0, "interrupted": 0, "skipped": 0}
    assert "- always: RuntimeError: planned failure 3" in (tmp_path / "retry" / "summary.md").read_text()
    from mlflow import MlflowClient

    client = MlflowClient(res["mlflow"]["tracking_uri"])
    runs = {r.data.tags["librarian.cell"]: r for r in client.search_runs(
        [res["mlflow"]["experiment_id"]], f"tags.`mlflow.parentRunId` = '{res['mlflow']['run_id']}'")}
    assert set(runs) == {"ok", "twice", "always"}  # the toy's own runs; `always` never reached its Tracker
    assert runs["always"].data.tags["librarian.driver_run"] == "true" and runs["always"].info.status == "FAILED"
    assert runs["twice"].info.status == "FINISHED" and runs["twice"].data.metrics["sweep.reward"] == pytest.approx(0.3)


@pytest.mark.slow
def test_a_killed_sweep_resumes_and_skips_finished_trials(tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "librarian.cli", "ablate", f"pipeline={TOY}", f"out_dir={out}",
           "grid={lr: [0.1, 0.2, 0.3, 0.4]}", "base.overrides={steps: 2, step_s: 2.0}",
           "ray.address=local", "ray.num_cpus=2", "metrics=[reward]", "n_boot=100"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # its own process group: Ray's processes die with it
    deadline, before = time.time() + 240, set()
    try:
        while time.time() < deadline and first.poll() is None and len(before) < 2:
            before = {a["cell"] for a in _attempts(out) if a["status"] == "finished"}
            time.sleep(0.2)
        time.sleep(1.5)  # the experiment's state is saved every second
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # half-way: the driver, Ray and the running trials
        first.wait()
    assert 2 <= len(before) < 4 and not (out / "results.json").exists()
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["resumed"] and [c["status"] for c in res["cells"]] == ["finished"] * 4
    for c in res["cells"]:
        ran = (out / "cells" / c["name"] / "attempts").read_text()
        if c["name"] in before:  # finished before the kill: kept, not run again
            assert c["skipped"] and ran == "x"
        assert c["metrics"]["reward"] == pytest.approx(2 * c["overrides"]["lr"])
    assert res["counts"]["skipped"] >= len(before)


def _attempts(out: Path) -> list[dict]:
    return [a for a in read_attempts(out / "attempts.jsonl") if a["event"] == "end"]
