"""`librarian demo` as shipped (rl=true) at the smallest scale that still runs its RL part: the demo preset
(configs/demo.yaml) with one GRPO step on local Ray, a tiny random model in place of SmolLM2, and the exam."""

from __future__ import annotations

import json
import math
import os

import pytest

from librarian.cli import main
from librarian.pipelines.demo.rl import DEMO_PRESET
from librarian.tracking import metric_history

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
SMALLEST = ("rl_overrides={steps: 1, data: {train_corpora: 2, exam_corpora: 1, questions_per_corpus: 1, "
            "docs_per_corpus: 4}, rollout: {options: {model: tiny}, workers: 1, budget: 2, max_new_tokens: 16}, "
            "probe: {workers: 0}, reward: {max_probes: 1}, learner: {grad_accum: 1}, sft: {corpora: 1, budget: 2}, "
            "exam: {scripted_budget: 2}}")


@pytest.mark.slow
def test_demo_with_rl_on_runs_every_part(tmp_path) -> None:
    from mlflow import MlflowClient

    out = tmp_path / "demo"
    code = main(["demo", f"out_dir={out}", "rl=true", "jam=false", "people=100", "curate_questions=2",
                 "search.embedder=hashing", SMALLEST])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["replay_identical"] is True and results["invariant_violations"] == 0
    rl = results["rl"]
    assert results["grpo_steps"] == rl["grpo_steps"] == 1 and rl["first_step"] == 0
    assert rl["policy_version"] == 1  # one learner update reached the rollout worker
    assert [r["name"] for r in results["rows"]] == ["flat", "scripted_builder", "trained_builder"]
    assert rl["exam"]["builds"]["trained_builder"] and rl["rollout_failures"] == 0
    for build in rl["exam"]["builds"]["trained_builder"]:  # kept call by call, named by corpus
        assert build["corpus"] in rl["exam"]["corpora"] and len(build["calls"]) == build["turns"]
    assert rl["sft"]["teacher_builds"] >= 1
    used = rl["config"]
    assert used["steps"] == 1 and used["rollout"]["options"] == {"model": "tiny"}  # the overrides reached part 3
    for key in ("constrained", "content_executor", "listing_lines"):  # ... on top of the shipped preset
        assert used["rollout"][key] == DEMO_PRESET["rollout"][key]
    assert used["out_dir"] == str(out / "rl")
    losses = metric_history(MlflowClient(rl["mlflow"]["tracking_uri"]), rl["mlflow"]["run_id"], "loss")
    assert [step for step, _ in losses] == [0] and math.isfinite(losses[0][1])
    for name in ("report.html", "trajectories.jsonl", "mlflow.db"):
        assert (out / "rl" / name).stat().st_size > 0
