"""What every pipeline's CLI entry shares: `--help`, config loading and checks, one-line config errors."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from librarian.config import ConfigError, load_config, to_plain


def config_keys(config: dict, prefix: str = "") -> list[str]:
    """The dotted keys of a plain config (nested sections flattened; an empty dict is a key of its own)."""
    out: list[str] = []
    for key, value in config.items():
        out.extend(config_keys(value, f"{prefix}{key}.") if isinstance(value, dict) and value else [f"{prefix}{key}"])
    return out


def write_resolved_config(cfg: Any, out_dir: str | Path) -> Path:
    """`out_dir/config.yaml`: the resolved config the run used (the folder is created)."""
    from omegaconf import OmegaConf

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)), encoding="utf-8")
    return path


def pipeline_main(name: str, doc: str | None, schema: type, run: Callable[[Any], Any], argv: Sequence[str],
                  check: Callable[[Any], None] | None = None, load: Callable[[Sequence[str]], Any] | None = None,
                  exit_code: Callable[[Any], int] | None = None) -> int:
    """`librarian <name> [--config FILE] [key=value ...]`: help, load + check (exit 2 with one line), run.

    `load` replaces `load_config(schema, argv)`; `exit_code(results)` maps the
    run's results to the exit status (default 0 when it returned anything).
    """
    argv = list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(doc or "")
        print("options (key=value):", ", ".join(sorted(config_keys(to_plain(schema())))))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        cfg = load(argv) if load is not None else load_config(schema, argv)
        if check is not None:
            check(cfg)
    except (ConfigError, ValueError) as exc:  # ValueError: a section's own validation
        print(f"librarian {name}: {exc}")
        return 2
    try:
        results = run(cfg)
    except ConfigError as exc:  # a setting that only the run can judge (a sweep's cells, a split's size)
        print(f"librarian {name}: {exc}")
        return 2
    out_dir = getattr(cfg, "out_dir", None)
    if out_dir and (Path(out_dir) / "results.json").is_file():
        print(f"wrote {Path(out_dir) / 'results.json'}")
    if exit_code is not None:
        return exit_code(results)
    return 0 if results is not None else 1
