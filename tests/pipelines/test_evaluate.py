"""`librarian evaluate` end to end at reduced scale (plain loop; the Ray pool has its own tests)."""

from __future__ import annotations

import json

import pytest

from librarian.cli import main
from librarian.tracking.tracker import metric_history

pytestmark = pytest.mark.slow

REDUCED = ["--config", "configs/evaluate_kbgym.yaml", "people=80", "questions=20", "gradient=5", "workers=0",
           "curated.train_questions=30", "baseline_options.raptor.embedder=hashing", "n_boot=200"]


def test_reduced_evaluation_compares_every_store_with_the_flat_one(tmp_path) -> None:
    out = tmp_path / "eval"
    assert main(["evaluate", *REDUCED, f"out_dir={out}"]) == 0
    r = json.loads((out / "results.json").read_text())
    rows = {row["name"]: row for row in r["rows"]}
    assert list(rows) == ["flat", "graphrag", "hipporag", "raptor", "autocompaction", "curated", "flattened",
                          "shuffled", "reactive_bm25"]
    for row in rows.values():
        assert row["n"] == 20 and 0 <= row["f1"] <= 1 and row["actions"] > 0
        assert row["rho_ci"][0] <= row["rho"] <= row["rho_ci"][1]
        assert row["f1_ci"][0] <= row["f1"] <= row["f1_ci"][1]
    assert rows["flat"]["rho"] == 1.0 and rows["flat"]["coverage_one_hop"] == 0.0
    assert rows["hipporag"]["coverage_one_hop"] > 0.9 and rows["curated"]["ops"] > 0
    assert rows["shuffled"]["info"]["of"] == "curated"
    assert set(r["gradient"]["curated"][0]) >= {"group", "rho", "rho_ci", "f1"}
    assert {g["group"] for g in r["gradient"]["curated"]} == {"trained", "both", "one", "neither", "all"}
    assert r["config"]["people"] == 80 and r["config"]["reader"]["budget"] == 15
    for name in ("rho_vs_coverage.png", "amortization.png", "gradient.png", "structure.png", "report.html",
                 "results.md", "exams.jsonl", "mlflow.db"):
        assert (out / name).stat().st_size > 0, name
    report = (out / "report.html").read_text()
    assert "data:image/png;base64," in report and "hipporag" in report
    lines = (out / "exams.jsonl").read_text().splitlines()
    assert len(lines) == 9 * 20 + 9 * 20  # every row on the questions and on 4 gradient groups of 5
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(out / 'mlflow.db').resolve()}")
    run = client.search_runs([client.get_experiment_by_name("evaluate").experiment_id])[0]
    assert metric_history(client, run.info.run_id, "curated.rho")[0][1] == pytest.approx(rows["curated"]["rho"])


def test_bad_configs_are_refused_with_a_reason(tmp_path, capsys) -> None:
    assert main(["evaluate", f"out_dir={tmp_path}", "stores=[graphrag]"]) == 2
    assert "must include 'flat'" in capsys.readouterr().err
    assert main(["evaluate", f"out_dir={tmp_path}", "stores=[flat,magic]"]) == 2
    assert "unknown ['magic']" in capsys.readouterr().err
    assert main(["evaluate", f"out_dir={tmp_path}", "ablations=[flattened]", "stores=[flat]"]) == 2
    assert "ablation_base" in capsys.readouterr().err


def test_reader_arms_and_the_new_baselines_appear_as_rows(tmp_path) -> None:
    out = tmp_path / "arms"
    arms = ("readers={reactive_bm25: {options: {policy: reactive_reader}}, "
            "reactive_dense: {options: {policy: reactive_reader}, search_mode: dense, search: {embedder: hashing}}, "
            "reactive_hybrid: {options: {policy: reactive_reader}, search_mode: hybrid, "
            "search: {embedder: hashing}}}")
    assert main(["evaluate", "--config", "configs/evaluate_kbgym.yaml", "people=80", "questions=12", "gradient=3",
                 "workers=0", "n_boot=100", "stores=[flat,autocompaction,untrained_builder]", "ablations=[]",
                 "baseline_options.untrained_builder={backend: hf, backend_args: {model: tiny}, budget: 2, "
                 "max_new_tokens: 16}", arms, f"out_dir={out}"]) == 0
    r = json.loads((out / "results.json").read_text())
    rows = {row["name"]: row for row in r["rows"]}
    assert list(rows) == ["flat", "autocompaction", "untrained_builder", "reactive_bm25", "reactive_dense",
                          "reactive_hybrid"]
    assert rows["autocompaction"]["ops"] > 1 and rows["untrained_builder"]["info"]["actions"] <= 2
    for name in ("reactive_bm25", "reactive_dense", "reactive_hybrid"):
        row = rows[name]
        assert row["n"] == 12 and row["info"]["store"] == "flat" and row["files_read"] == 0
        assert row["actions"] <= 3 and row["rho"] < 1.0  # fewer actions than the navigating reader
    assert rows["reactive_bm25"]["f1"] > 0
    assert rows["reactive_dense"]["info"]["search_mode"] == "dense"
    assert main(["evaluate", f"out_dir={tmp_path}", "readers={flat: {}}"]) == 2
