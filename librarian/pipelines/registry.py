"""The one table of `librarian` commands: what the CLI dispatches to, and, for a pipeline, the run function,
config class and check that `librarian ablate` sweeps and `librarian plan` validates.

Targets are `module:attribute` strings, imported only when used, so
`librarian --help` loads no command's module.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from librarian.config import ConfigError

P = "librarian.pipelines."


@dataclass(frozen=True)
class Pipeline:
    """A pipeline by name: its run function, its config class (else the run function's annotation), a check."""

    run: str
    config: str | None = None
    check: str | None = None

    def load(self) -> tuple[type, Callable[[Any], dict], Callable[[Any], None] | None]:
        run = _attr(self.run)
        if self.config:
            schema = _attr(self.config)
        else:
            hints = typing.get_type_hints(run)
            schema = next(iter(v for k, v in hints.items() if k != "return"), None)
            if schema is None:
                raise ConfigError(f"pipeline {self.run}: its run function has no annotated config argument")
        return schema, run, (_attr(self.check) if self.check else None)


@dataclass(frozen=True)
class Command:
    """A `librarian` command: its entry (`module:function`, called with the arguments) and one-line summary;
    `pipeline` when `ablate` can sweep it, `sweep_rank` orders those (`plan` guesses the first on a tie)."""

    main: str
    summary: str
    pipeline: Pipeline | None = None
    sweep_rank: int = 0


def _swept(module: str, config: str, check: str, rank: int) -> dict[str, Any]:
    return {"pipeline": Pipeline(f"{P}{module}:run", P + config, P + check), "sweep_rank": rank}


REGISTRY: dict[str, Command] = {
    "demo": Command(P + "demo.demo:main", "the whole system at toy scale on one CPU machine"),
    "data": Command("librarian.datasets.cli:main", "generate or convert a dataset to Parquet"),
    "train_builder": Command(P + "builder.train:main", "Librarian Agents: builder RL with dense telescoping rewards",
                             **_swept("builder.train", "builder.config:TrainBuilderConfig", "builder.train:check", 1)),
    "exam_builder": Command(P + "builder.exam_saved:main", "the builder exam of a saved policy, on any universe"),
    "train_curator": Command(P + "curator.train:main", "KBGym supervised curation (forward/backward passes)",
                             **_swept("curator.train", "curator.train:TrainCuratorConfig", "curator.train:_check", 2)),
    "train_researcher": Command(P + "researcher.train:main", "JAM: verified-trajectory SFT then hint-guided GRPO",
                                **_swept("researcher.train", "researcher.config:TrainResearcherConfig",
                                         "researcher.train:check", 4)),
    "evaluate": Command(P + "evaluate.evaluate:main", "exams, baselines, metrics and plots",
                        **_swept("evaluate.evaluate", "evaluate.evaluate:EvaluateConfig", "evaluate.evaluate:_check", 3)),
    "evaluate_memory": Command(P + "evaluate.memory:main", "JAM: the researcher's arms on Memory-Gym or benchmark files",
                               **_swept("evaluate.memory", "evaluate.memory:EvaluateMemoryConfig",
                                        "evaluate.memory:check", 5)),
    "evaluate_online": Command(P + "evaluate.online:main", "online curation: a prequential stream, rho per window",
                               **_swept("evaluate.online", "evaluate.online_config:EvaluateOnlineConfig",
                                        "evaluate.online_config:check", 6)),
    "ablate": Command(P + "ablate.sweep:main", "sweeps of ablations across nodes"),
    "plan": Command(P + "plan_command:main", "place a job on a cluster file and check its GPU memory, starting nothing"),
    "build": Command("librarian.app.build:main", "build a workspace from your documents (folder, JSONL or dataset)"),
    "ask": Command("librarian.app.ask:main", "answer questions over a workspace with a reader role"),
    "serve": Command("librarian.app.serve:main", "serve a workspace over MCP (stdio, HTTP) or an HTTP API"),
    "rollback": Command("librarian.app.rollback:main", "serve an earlier version of a workspace curated online"),
    "view": Command("librarian.app.viewer:main", "write a self-contained HTML viewer of a snapshot"),
    "diff": Command("librarian.app.diff:main", "what changed between two snapshots (text and HTML)"),
}
# name -> ("module:function", one-line summary): what the CLI lists and runs, in this order
COMMANDS: dict[str, tuple[str, str]] = {name: (c.main, c.summary) for name, c in REGISTRY.items()}
# name -> Pipeline: what `librarian ablate` can sweep
PIPELINES: dict[str, Pipeline] = {name: c.pipeline for name, c in sorted(REGISTRY.items(), key=lambda nc: nc[1].sweep_rank)
                                  if c.pipeline is not None}


def _attr(target: str) -> Any:
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {target}: {exc}") from None


def pipeline(name: str) -> Pipeline:
    """The registered pipeline `name`, or `module:function` (its config class from the annotation)."""
    if name in PIPELINES:
        return PIPELINES[name]
    if ":" in name:
        return Pipeline(name)
    raise ConfigError(f"unknown pipeline {name!r}; choose from {', '.join(PIPELINES)} or write module:function")
