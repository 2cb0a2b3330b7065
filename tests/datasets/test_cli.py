"""`librarian data ...`: outputs, results.json, and one-line errors with exit code 2."""

from __future__ import annotations

import json

from librarian.cli import main as top_main
from librarian.datasets import read_parquet
from librarian.datasets.cli import main

from .formats import write_locomo


def test_kbgym_writes_parquet_card_and_results(tmp_path):
    out = tmp_path / "kb"
    assert main(["kbgym", "--people", "120", "--seed", "3", "--out", str(out), "--gradient", "5"]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["questions_by_split"] == {"train": 150, "test_in": 100, "test_out": 50, "eval": 30}
    assert r["classes"] == 10 and r["templates"] == 26 and r["docs"] > 1000 and r["gold_check"] == "passed"
    card = (out / "CARD.md").read_text()
    assert "| QC10 |" in card and "| qc10_birthdate |" in card
    b = read_parquet(out)
    assert len(b.corpus) == r["docs"] and (out / "gradient.parquet").is_file()


def test_memorygym_and_loader_via_top_level_cli(tmp_path):
    assert top_main(["data", "memorygym", "--sessions", "12", "--out", str(tmp_path / "mg")]) == 0
    assert json.loads((tmp_path / "mg" / "results.json").read_text())["docs"] == 12
    src = write_locomo(tmp_path / "locomo10.json")
    assert main(["locomo", "--input", str(src), "--out", str(tmp_path / "lc")]) == 0
    assert json.loads((tmp_path / "lc" / "results.json").read_text())["questions"] == 4


def test_phantomwiki_cli(tmp_path):
    assert main(["phantomwiki", "--out", str(tmp_path / "pw")]) == 0
    r = json.loads((tmp_path / "pw" / "results.json").read_text())
    assert r["docs"] > 100 and r["questions"] > 50


def test_errors_are_one_line_with_exit_2(tmp_path, capsys):
    assert main(["kbgymm", "--out", str(tmp_path)]) == 2
    assert "unknown dataset 'kbgymm'" in capsys.readouterr().err
    assert main(["kbgym", "--people", "many", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "invalid int value" in err and err.count("\n") == 1
    assert main(["locomo", "--input", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")]) == 2
    assert "none.json: file not found" in capsys.readouterr().err
    assert main(["hotpotqa", "--out", str(tmp_path)]) == 2
    assert "--input" in capsys.readouterr().err
