"""The command-line entry point."""

from __future__ import annotations

import importlib
import json
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from librarian.cli import main
from librarian.config import describe
from librarian.pipelines.ablate.config import AblateConfig
from librarian.pipelines.demo.demo import DemoConfig
from librarian.pipelines.entry import _shown
from librarian.pipelines.keys_help import GLOSSARY
from librarian.pipelines.registry import COMMANDS, PIPELINES


def test_help_lists_every_command(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_every_command_resolves_to_a_callable_entry() -> None:
    for name, (target, summary) in COMMANDS.items():
        module_name, func_name = target.split(":")
        assert callable(getattr(importlib.import_module(module_name), func_name)), name
        assert summary, name


def test_unknown_command_suggests_the_closest(capsys) -> None:
    assert main(["evalute"]) == 2
    assert "did you mean 'evaluate'" in capsys.readouterr().err


def test_console_script_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "librarian.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("librarian ")


# --- one CLI style -------------------------------------------------------------------------------------

LIBRARIAN = [sys.executable, "-m", "librarian.cli"]


def _schemas() -> dict[str, type]:
    """Every pipeline command and its config schema."""
    out = {name: p.load()[0] for name, p in PIPELINES.items()}
    return {**out, "ablate": AblateConfig, "demo": DemoConfig}


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LIBRARIAN, *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_every_pipeline_command_has_a_schema() -> None:
    pipelines = {n for n, (target, _) in COMMANDS.items() if target.startswith("librarian.pipelines.")}
    # plan validates the pipelines' configs and exam_builder reads a train_builder run's: neither has one of its own
    assert pipelines - {"plan", "exam_builder"} == set(_schemas())


@pytest.mark.parametrize("name", sorted(["train_builder", "train_curator", "train_researcher", "evaluate",
                                         "evaluate_memory", "ablate", "demo"]))
def test_pipeline_help_lists_every_key_with_default_and_description(name, capsys) -> None:
    assert main([name, "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    docs = describe(_schemas()[name], GLOSSARY)
    assert docs and [d for d in docs if not d.help] == []  # a new key needs a comment or a glossary entry
    for d in docs:
        at = lines.index(f"  {d.key}={_shown(d.default)}")
        assert lines[at + 1].strip() == d.help, d.key
    assert any("--print-config" in line for line in lines) and any("--out DIR" in line for line in lines)


@pytest.mark.parametrize("name", sorted(["train_builder", "train_curator", "train_researcher", "evaluate",
                                         "evaluate_memory", "ablate", "demo"]))
def test_every_pipeline_takes_out_and_config_and_prints_its_config(name, tmp_path, capsys) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_text(f"out_dir: {tmp_path / 'elsewhere'}\nexperiment: from-the-file\n")
    out = tmp_path / "run"
    assert main([name, "--config", str(preset), "--out", str(out), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["out_dir"] == str(out) and printed["experiment"] == "from-the-file"  # the file, then --out
    assert not out.exists() and not (tmp_path / "elsewhere").exists()  # printed, nothing run


def test_a_malformed_yaml_file_is_one_line_on_stderr_and_exit_2(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("people: 80\nreader:\n  budget: [3\n")
    done = _run("evaluate", "--config", str(bad), f"out_dir={tmp_path / 'x'}")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"librarian evaluate: {bad}, line 4, column 1: not valid YAML "
                                                "(expected ',' or ']', but got '<stream end>')"]


def test_config_errors_go_to_stderr_as_one_line(capsys) -> None:
    assert main(["demo", "people=abc"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().splitlines() == [
        "librarian demo: bad value for 'people': Value 'abc' of type 'str' could not be converted to Integer"]
    assert main(["evaluate", "--out"]) == 2 and "--out needs a value" in capsys.readouterr().err


def test_data_without_a_dataset_is_a_usage_error(capsys) -> None:
    assert main(["data"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "usage: librarian data" in captured.err
    assert main(["data", "--help"]) == 0 and "usage: librarian data" in capsys.readouterr().out


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    notes = root / "notes"
    notes.mkdir()
    for i, (who, what) in enumerate([("Ada Lovelace", "Nimbus"), ("Alan Turing", "Enigma"), ("Grace Hopper", "Cobol")]):
        (notes / f"n{i}.md").write_text(f"# {what}\n\nOwner: {who}\n", encoding="utf-8")
    assert main(["build", str(notes), "--out", str(root / "ws"), "--embedder", "none", "--no-export"]) == 0
    return root / "ws"


def test_serve_port_0_prints_the_port_it_bound(workspace) -> None:
    proc = subprocess.Popen([*LIBRARIAN, "serve", str(workspace), "--api", "--port", "0"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    try:
        line = proc.stderr.readline()
        match = re.search(r"on http://127\.0\.0\.1:(\d+)/docs", line)
        assert match and int(match.group(1)) > 0, line
        with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/openapi.json", timeout=30) as resp:
            assert "paths" in json.load(resp)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_on_a_busy_port_is_one_line_and_exit_2(workspace) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        done = _run("serve", str(workspace), "--api", "--port", str(busy.getsockname()[1]))
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert "cannot listen on 127.0.0.1:" in done.stderr


def test_ask_refuses_a_blank_question(workspace, capsys) -> None:
    assert main(["ask", str(workspace), "   "]) == 2
    captured = capsys.readouterr()
    assert "question" in captured.err and captured.out == ""


def test_print_config_masks_credentials(capsys) -> None:
    assert main(["evaluate", "--print-config", "reader.options={api_key: sk-live-1234567890, model: m}"]) == 0
    out = capsys.readouterr().out
    assert "sk-live-1234567890" not in out and "api_key: '***'" in out and "model: m" in out
