"""`librarian evaluate` on PhantomWiki: the baseline table, and rows that say why rho is not reported."""

from __future__ import annotations

import json

import pytest

from librarian.cli import main

pytestmark = pytest.mark.slow

REDUCED = ["--config", "configs/evaluate_phantomwiki.yaml", "workers=0", "n_boot=200", "curated.epochs=1",
           "stores=[flat,graphrag,hipporag,curated]", "ablations=[shuffled]"]


@pytest.fixture(scope="module")
def pw_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("pw-eval") / "pw"
    assert main(["data", "phantomwiki", "--out", str(out)]) == 0
    return out


def test_baselines_and_the_curated_store_on_phantomwiki(tmp_path, pw_folder) -> None:
    out = tmp_path / "eval"
    assert main(["evaluate", *REDUCED, "data.source=path", f"data.path={pw_folder}", f"out_dir={out}"]) == 0
    r = json.loads((out / "results.json").read_text())
    rows = {row["name"]: row for row in r["rows"]}
    assert list(rows) == ["flat", "graphrag", "hipporag", "curated", "shuffled", "reactive_bm25"]
    assert r["questions"] == 39 and r["data"]["source"] == "path" and "gradient" not in r  # test_in + test_out
    assert rows["flat"]["f1"] >= 0.9 and all(row["failure"] is None for row in rows.values() if "failure" in row)
    for row in rows.values():
        assert row["n"] == 39 and row["rho_ci"][0] <= row["rho"] <= row["rho_ci"][1]
    assert rows["curated"]["ops"] > 0 and rows["curated"]["rho"] < 1.0
    assert rows["curated"]["f1"] >= rows["flat"]["f1"] - 0.03 and rows["curated"]["non_inferior"] is True
    assert rows["shuffled"]["f1"] < rows["curated"]["f1"]  # the indexes' links carry the answers
    assert rows["reactive_bm25"]["f1"] < rows["flat"]["f1"]  # one search of the question misses the chains
    assert (out / "report.html").stat().st_size > 0 and (out / "rho_vs_coverage.png").is_file()


def test_rows_name_the_failure_when_the_flat_store_is_not_answered(tmp_path, pw_folder) -> None:
    out = tmp_path / "floor"
    assert main(["evaluate", *REDUCED, "data.source=path", f"data.path={pw_folder}", f"out_dir={out}",
                 "reader.budget=1", "stores=[flat,hipporag]", "ablations=[]", "readers={}"]) == 0
    r = json.loads((out / "results.json").read_text())
    for row in r["rows"]:
        assert row["f1_flat"] < 0.5 and row["rho"] is None and row["rho_ci"] is None
        assert row["non_inferior"] is None and "below the floor 0.50" in row["failure"]
    assert not (out / "rho_vs_coverage.png").exists()
    assert "below the floor" in (out / "report.html").read_text()
