"""`librarian <command> [args]`: the command-line entry point.

Each command (`pipelines/registry.py`) lives in its own module and is imported only when it runs, so
`librarian --help` stays fast and a heavy stack (Ray, torch) loads only for
the commands that need it.

One style for every command: results on stdout; errors on stderr, one line
naming what was wrong; exit 0 on success, 1 when the run itself failed, 2 for
a usage or input error (a bad option, key, value, file or YAML), 130 on Ctrl-C.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Sequence

from librarian import __version__
from librarian.pipelines.registry import COMMANDS


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: librarian <command> [args...]", "", "commands:"]
    for name, (_, summary) in COMMANDS.items():
        lines.append(f"  {name:<{width}}  {summary}")
    lines.append("")
    lines.append("Run `librarian <command> --help` for a command's options.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a command; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if args[0] in {"-V", "--version"}:
        print(f"librarian {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        print(f"librarian: unknown command '{name}'{hint}; run `librarian --help`", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    try:
        return int(func(rest) or 0)
    except KeyboardInterrupt:
        print(f"librarian {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `librarian ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
