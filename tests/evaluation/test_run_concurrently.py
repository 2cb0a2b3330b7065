"""run_concurrently: both halves of a learning benchmark run as separate processes; a failure names the folder."""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import pytest

from librarian.evaluation.learning_curves import run_concurrently

SCRIPT = textwrap.dedent("""
    import argparse, json, os, pathlib, sys
    ap = argparse.ArgumentParser()
    ap.add_argument("--out"); ap.add_argument("--config"); ap.add_argument("--steps", type=int)
    ap.add_argument("--only"); ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    if a.only in a.overrides:
        sys.exit(3)
    folder = pathlib.Path(a.out) / a.only
    folder.mkdir(parents=True)
    folder.joinpath("results.json").write_text(json.dumps(
        {"which": a.only, "steps": a.steps, "config": a.config, "overrides": a.overrides, "pid": os.getpid()}))
""")


def _args(overrides: list[str]) -> argparse.Namespace:
    return argparse.Namespace(config="cfg.yaml", steps=5, overrides=overrides)


def test_runs_both_halves_in_separate_processes(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT, encoding="utf-8")
    run, control = run_concurrently(str(script), _args(["a=1"]), tmp_path / "out")
    assert (run["which"], control["which"]) == ("run", "control")
    assert run["steps"] == control["steps"] == 5 and run["overrides"] == ["a=1"] and run["config"] == "cfg.yaml"
    assert run["pid"] != control["pid"]


def test_a_failing_half_raises_with_the_exit_codes(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT, encoding="utf-8")
    with pytest.raises(SystemExit, match=r"exit codes \[0, 3\]"):
        run_concurrently(str(script), _args(["control"]), tmp_path / "out")
    assert json.loads((tmp_path / "out" / "run" / "results.json").read_text())["which"] == "run"
