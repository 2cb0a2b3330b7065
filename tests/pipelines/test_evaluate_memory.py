"""`librarian evaluate_memory`: the researcher's arms on a generated history and on a benchmark file."""

from __future__ import annotations

import json
import os

import pytest

from librarian.cli import main
from tests.datasets.formats import write_locomo

os.environ.setdefault("HF_HUB_OFFLINE", "1")
FAST = ["eval.embedder=hashing", "eval.n_boot=200"]


def test_generated_history_end_to_end(tmp_path, capsys):
    out = tmp_path / "mg"
    # a history long enough that the flat store's misses show (at 30 sessions flat scores 0.95 and the CI holds 0)
    code = main(["evaluate_memory", f"out_dir={out}", "memorygym.speakers=6", "memorygym.sessions=60",
                 "memorygym.seed=3", *FAST])
    assert code == 0
    r = json.loads((out / "results.json").read_text())
    assert r["questions"] > 50 and r["tasks"] == 1
    assert r["source_recall_no_researcher"] < r["source_recall_hierarchical"]  # one-shot retrieval misses sources
    lo, hi = r["hierarchical_minus_flat_ci"]
    assert 0 < lo < r["hierarchical_minus_flat"] < hi  # hierarchical beats flat, and the 95% CI excludes a tie
    assert r["hierarchical_minus_flat"] == pytest.approx(r["source_recall_hierarchical"] - r["source_recall_flat"])
    assert set(r["arms"]) == {"hierarchical", "flat", "no_researcher", "no_bm25", "no_dense"}
    for name in ("arms.png", "arms.md", "evaluation.json", "config.yaml"):
        assert (out / name).stat().st_size > 0
    assert r["mlflow"]["run_id"] and "| hierarchical |" in capsys.readouterr().out


def test_a_benchmark_file_through_its_loader_with_a_client(tmp_path):
    path = write_locomo(tmp_path / "locomo10.json")
    out = tmp_path / "locomo"
    code = main(["evaluate_memory", "kind=locomo", f"path={path}", f"out_dir={out}", "eval.arms=[flat,no_researcher]",
                 "client.backend=hf", "client.options={model: tiny}", *FAST])
    assert code == 0
    r = json.loads((out / "results.json").read_text())
    ev = json.loads((out / "evaluation.json").read_text())
    assert r["kind"] == "locomo" and r["questions"] > 0 and set(r["arms"]) == {"flat", "no_researcher"}
    assert all(row["client_score"] is not None for row in ev["per_question"])  # the client answered every one


@pytest.mark.parametrize(("args", "message"), [
    (["kind=locomoo"], "kind must be one of"),
    (["kind=locomo"], "needs path=FILE"),
    (["kind=hotpotqa", "path=/nonexistent/hotpot.json"], "does not exist"),
    (["eval.arms=[hierarchical,nope]"], "unknown arm(s) nope"),
    (["eval.budgte=3"], "did you mean 'eval.budget'"),
])
def test_bad_config_is_one_line_and_exit_2(args, message, capsys):
    assert main(["evaluate_memory", *args]) == 2
    assert message in capsys.readouterr().err
