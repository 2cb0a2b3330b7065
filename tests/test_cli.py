"""The command-line entry point."""

from __future__ import annotations

import subprocess
import sys

from librarian.cli import COMMANDS, main


def test_help_lists_every_command(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_every_command_resolves_to_a_callable_entry() -> None:
    import importlib

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
