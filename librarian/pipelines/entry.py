"""What every pipeline's CLI entry shares: `--help` with every key, `--print-config`, `--out`, config
loading and checks, and one-line config errors on stderr (exit 2)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from librarian.config import ConfigError, describe, load_config, to_plain
from librarian.datasets.records import DatasetError
from librarian.pipelines.keys_help import GLOSSARY
from librarian.redact import redact


def config_keys(config: dict, prefix: str = "") -> list[str]:
    """The dotted keys of a plain config (nested sections flattened; an empty dict is a key of its own)."""
    out: list[str] = []
    for key, value in config.items():
        out.extend(config_keys(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [f"{prefix}{key}"])
    return out


def write_resolved_config(cfg: Any, out_dir: str | Path) -> Path:
    """`out_dir/config.yaml`: the resolved config the run used, credentials masked (the folder is created)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"

    path.write_text(OmegaConf.to_yaml(OmegaConf.create(redact(to_plain(cfg)))), encoding="utf-8")
    return path


def _shown(value: Any) -> str:
    """A default as the user would type it after `key=`."""
    if isinstance(value, str):
        return value if value else "''"
    return json.dumps(value, default=str)


def help_text(name: str, doc: str | None, schema: type) -> str:
    """`librarian NAME --help`: the pipeline's description, the flags, then every key with default and meaning."""
    docs = describe(schema, GLOSSARY)
    lines = [(doc or "").strip(), "",
             f"usage: librarian {name} [--config FILE ...] [--out DIR] [--print-config] [key=value ...]", "",
             "  --config FILE, config=FILE  a YAML file of keys (several merge in order; key=value wins)"]
    if any(d.key == "out_dir" for d in docs):
        lines.append("  --out DIR                   the output folder (out_dir=DIR)")
    lines += ["  --print-config              print the resolved config as YAML and exit", "",
              "keys (key=default, then what it means):"]
    for d in docs:
        lines.append(f"  {d.key}={_shown(d.default)}")
        if d.help:
            lines.append(f"      {d.help}")
    return "\n".join(lines)


def print_config(cfg: Any) -> None:
    """The resolved config as YAML on stdout, credentials masked."""
    print(OmegaConf.to_yaml(redact(to_plain(cfg))), end="")


def pipeline_main(name: str, doc: str | None, schema: type, run: Callable[[Any], Any], argv: Sequence[str],
                  check: Callable[[Any], None] | None = None, load: Callable[[Sequence[str]], Any] | None = None,
                  exit_code: Callable[[Any], int] | None = None) -> int:
    """`librarian <name> [--config FILE] [--out DIR] [--print-config] [key=value ...]`.

    `--help` lists every key; a bad config is one line on stderr and exit 2;
    `--print-config` prints the resolved config and exits. `load` replaces
    `load_config(schema, argv)`; `exit_code(results)` maps the run's results
    to the exit status (default 0 when it returned anything).
    """
    argv = list(argv)
    if any(a in ("-h", "--help") for a in argv):
        print(help_text(name, doc, schema))
        return 0
    print_only = "--print-config" in argv
    argv = [a for a in argv if a != "--print-config"]
    try:
        cfg = load(argv) if load is not None else load_config(schema, argv)
        if check is not None:
            check(cfg)
    except (ConfigError, ValueError) as exc:  # ValueError: a section's own validation
        print(f"librarian {name}: {exc}", file=sys.stderr)
        return 2
    if print_only:
        print_config(cfg)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    try:
        results = run(cfg)
    except (ConfigError, DatasetError) as exc:  # a setting only the run can judge (a sweep's cells, a split's size)
        print(f"librarian {name}: {exc}", file=sys.stderr)
        return 2
    out_dir = getattr(cfg, "out_dir", None)
    if out_dir and (Path(out_dir) / "results.json").is_file():
        print(f"wrote {Path(out_dir) / 'results.json'}")
    if exit_code is not None:
        return exit_code(results)
    return 0 if results is not None else 1
