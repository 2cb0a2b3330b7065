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


def test_unbuilt_command_says_so_in_one_line_and_fails(capsys) -> None:
    unbuilt = [name for name, (target, _) in COMMANDS.items() if target is None]
    for name in unbuilt:
        assert main([name]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"librarian {name}: not built yet"]


def test_unknown_command_suggests_the_closest(capsys) -> None:
    assert main(["evalute"]) == 2
    assert "did you mean 'evaluate'" in capsys.readouterr().err


def test_console_script_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "librarian.cli", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("librarian ")
