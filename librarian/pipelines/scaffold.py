"""What the non-RL pipelines (evaluate, evaluate_online, train_curator) share around their recipe: their
config's first keys (`DataRunConfig`), the checked config and the out folder with its config.yaml, the data source,
the MLflow run and results.json."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian.config import ConfigError, to_plain, write_config
from librarian.datasets.records import DatasetError
from librarian.datasets.source import SourceConfig, load_source, require_splits
from librarian.redact import redact
from librarian.tracking import Tracker


@dataclass
class DataRunConfig:
    """The keys these pipelines' configs share, first in each: the out folder and the data source `load_data` reads.

    A pipeline's config extends it and gives `out_dir` its own default (a field declared again keeps its place).
    """

    out_dir: str = "build/run"
    data: SourceConfig = field(default_factory=SourceConfig)  # kbgym | phantomwiki | path
    people: int = 200  # KBGym universe size
    seed: int = 1  # the universe's seed (KBGym, PhantomWiki)


def tracker(cfg: Any, pipeline: str) -> Tracker:
    """The run's MLflow run (`experiment`, `tracking_uri`, local under `out_dir` by default)."""
    return Tracker(cfg.experiment, cfg.out_dir, cfg.tracking_uri or None, pipeline=pipeline)


def tracked(cfg: Any, pipeline: str, check: Callable[[Any], None], body: Callable[[Any], dict[str, Any]],
            log_figures: Callable[[Tracker, dict[str, Any]], None]) -> dict[str, Any]:
    """Check `cfg`, then run `body(cfg)` inside the pipeline's MLflow run (FAILED if it raises): the config
    logged first, then `log_figures(tracker, results)` and the run's files; returns the results."""
    check(cfg)
    with tracker(cfg, pipeline) as run:
        run.log_config(cfg)
        results = body(cfg)
        log_figures(run, results)
        run.log_run_files(cfg.out_dir)
    return results


def start(cfg: Any, check: Callable[[Any], None]) -> tuple[Path, float]:
    """Check the config and write `out_dir/config.yaml`; returns the out folder and the start time."""
    check(cfg)
    started = time.perf_counter()
    return write_config(cfg.out_dir, cfg), started


def load_data(cfg: DataRunConfig, out: Path, splits: Sequence[str] = ()) -> Any:
    """The config's data source (`data`, `people`, `seed`), with `splits` required; a bad one is a ConfigError."""
    try:
        source = load_source(cfg.data, cfg.people, cfg.seed, out / "data")
        if splits:
            require_splits(source, list(splits))
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
    return source


def config_record(cfg: Any) -> dict:
    """The resolved config as results.json records it, credentials masked."""
    return redact(to_plain(cfg))


def write_results(out: Path, results: dict[str, Any]) -> Path:
    """`out/results.json`."""
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    return path
