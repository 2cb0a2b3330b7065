"""`librarian train_curator` on the official PhantomWiki generator's universe, and the F1 floor on rho."""

from __future__ import annotations

import json

import pytest

from librarian.cli import main

CONFIG = ["--config", "configs/curator_phantomwiki.yaml", "n_boot=200"]


@pytest.fixture(scope="module")
def pw_folder(tmp_path_factory):
    """`librarian data phantomwiki --out D`: the default universe as a data folder (generated once)."""
    out = tmp_path_factory.mktemp("pw-data") / "pw"
    assert main(["data", "phantomwiki", "--out", str(out)]) == 0
    return out


def _run(tmp_path, name, folder, *extra):
    out = tmp_path / name
    assert main(["train_curator", *CONFIG, "data.source=path", f"data.path={folder}", f"out_dir={out}",
                 *extra]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_curation_on_phantomwiki_is_cheaper_at_equal_f1(tmp_path, pw_folder) -> None:
    out, r = _run(tmp_path, "run", pw_folder)
    assert r["data"]["source"] == "path" and r["data"]["name"] == f"path:{pw_folder}"
    assert r["backends"] == {"reader": "scripted:phantom_reader", "curator": "scripted:phantom_curator",
                             "exam_reader": "scripted:phantom_reader"}
    assert len(r["f1_flat_by_template"]) == 8 and min(r["f1_flat_by_template"].values()) >= 0.9
    assert r["f1_flat_trained"] >= 0.9 and r["failure"] is None
    assert r["rho_trained"] < 1.0 and r["f1_trained"] >= r["f1_flat_trained"] - 0.03  # paper 001 Eq. 1
    assert r["rho_ci_trained"][0] <= r["rho_trained"] <= r["rho_ci_trained"][1]
    assert r["non_inferior_trained"] is True and r["training"]["ops_applied"] > 0
    assert r["training"]["tools_used"]["add"] == r["training"]["ops_applied"]
    questions = {s: r["splits"][s]["store"]["n"] for s in ("trained", "test_in", "test_out", "eval")}
    assert sum(questions.values()) == 80  # every question of the universe is examined
    for split in ("test_in", "test_out"):
        assert r["splits"][split]["rho_ci"][0] <= r["splits"][split]["rho"] <= r["splits"][split]["rho_ci"][1]
    table = (out / "results.md").read_text()
    assert "| pw_t7 |" in table and "not reported" not in table


def test_rho_is_not_reported_when_the_flat_store_is_not_answered(tmp_path, pw_folder) -> None:
    # one action: the reader must answer before it reads anything, so both stores score (near) zero
    out, r = _run(tmp_path, "floor", pw_folder, "exam_budget=1", "forward_budget=1", "epochs=1",
                  "exams=[trained]", "train_questions=6", "eval_questions=0")
    assert r["f1_flat_trained"] < 0.5
    assert r["rho_trained"] is None and r["rho_ci_trained"] is None and r["non_inferior_trained"] is None
    assert r["hypothesis_holds_trained"] is None
    assert "below the floor 0.50" in r["failure"] and "below the floor" in r["splits"]["trained"]["failure"]
    assert "not reported" in (out / "results.md").read_text()
    # the same run with the floor at zero reports rho again
    _, r0 = _run(tmp_path, "nofloor", pw_folder, "exam_budget=1", "forward_budget=1", "epochs=1",
                 "exams=[trained]", "train_questions=6", "eval_questions=0", "f1_floor=0")
    assert r0["rho_trained"] is not None and r0["failure"] is None


def test_bad_data_settings_are_refused(tmp_path, capsys) -> None:
    assert main(["train_curator", f"out_dir={tmp_path}", "data.source=phantom"]) == 2
    assert "data.source must be one of kbgym, phantomwiki, path" in capsys.readouterr().err
    assert main(["train_curator", f"out_dir={tmp_path}", "data.source=path"]) == 2
    assert "needs data.path" in capsys.readouterr().err
    assert main(["train_curator", f"out_dir={tmp_path}", "data.source=path", f"data.path={tmp_path / 'x'}"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["train_curator", f"out_dir={tmp_path}", "f1_floor=2"]) == 2
    assert "f1_floor must be in [0, 1]" in capsys.readouterr().err
