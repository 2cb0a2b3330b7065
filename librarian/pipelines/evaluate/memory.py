"""`librarian evaluate_memory`: a JAM researcher on memory tasks, with paper 002's ablation arms.

Reads top to bottom: the tasks (a generated Memory-Gym history, or a
benchmark file through its loader: LoCoMo, LongMemEval, HotpotQA,
NarrativeQA, or a `librarian data memorygym` folder) -> the researcher (the
scripted one by default, or any backend by name: `hf` with SmolLM2 or a
trained checkpoint's base model, `openai`, `vllm`) and an optional client
that answers from the researcher's context -> `evaluate_researcher` on every
arm (hierarchical, flat, no researcher, no BM25, no dense): source recall with
bootstrap CIs, answer in context (and the client's official metric), rounds,
budget exhaustion, latency, construction time -> `results.json`,
`evaluation.json`, `arms.md` (opening with what the paired differences
against the full system show), `arms.png`, an MLflow run.

    librarian evaluate_memory kind=locomo path=data/locomo10.json out_dir=build/jam_locomo
    librarian evaluate_memory out_dir=build/jam_mg memorygym.sessions=80 eval.embedder=minilm
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian.config import ConfigError, to_plain
from librarian.datasets.memorygym import MemoryGymConfig
from librarian.evaluation.memory_eval import evaluate_researcher
from librarian.evaluation.memory_report import arm_findings, arms_markdown, plot_arms
from librarian.evaluation.memory_tasks import load_memory_tasks, memorygym_task
from librarian.models import make_backend
from librarian.pipelines.entry import pipeline_main, write_resolved_config
from librarian.pipelines.researcher.config import ArmsEvalSection
from librarian.pipelines.researcher.report import write_atomic
from librarian.redact import redact
from librarian.tracking import Tracker

log = logging.getLogger("librarian.evaluate_memory")
KINDS = ("memorygym", "locomo", "longmemeval", "hotpotqa", "narrativeqa")


@dataclass
class GeneratedHistory:
    """The Memory-Gym history generated when `kind=memorygym` and no `path` is given."""

    speakers: int = 6
    sessions: int = 40
    seed: int = 1


@dataclass
class BackendSpec:
    """A policy backend by name (`librarian.models.make_backend`) and its options."""

    backend: str = "scripted"
    options: dict = field(default_factory=lambda: {"policy": "jam_researcher"})


@dataclass
class EvaluateMemoryConfig:
    """What `librarian evaluate_memory` runs; override any field as key=value."""

    out_dir: str = "build/evaluate_memory"
    kind: str = "memorygym"  # memorygym | locomo | longmemeval | hotpotqa | narrativeqa
    path: str = ""  # the benchmark file or folder; empty with kind=memorygym: generate `memorygym`
    split: str = ""  # only this split's questions (empty: all)
    max_tasks: int = 0  # at most this many tasks (conversations, stories...); 0: all
    memorygym: GeneratedHistory = field(default_factory=GeneratedHistory)
    researcher: BackendSpec = field(default_factory=BackendSpec)
    client: BackendSpec = field(default_factory=lambda: BackendSpec(backend="", options={}))  # "": no client
    eval: ArmsEvalSection = field(default_factory=ArmsEvalSection)
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else evaluate_memory)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir)


def check(cfg: EvaluateMemoryConfig) -> None:
    """Raise `ConfigError` naming the first bad setting (the eval section is checked by its own dataclass)."""
    if cfg.kind not in KINDS:
        raise ConfigError(f"kind must be one of {', '.join(KINDS)}, got {cfg.kind!r}")
    if cfg.kind != "memorygym" and not cfg.path:
        raise ConfigError(f"kind={cfg.kind} needs path=FILE (the benchmark file or folder)")
    if cfg.path and not Path(cfg.path).exists():
        raise ConfigError(f"path {cfg.path!r} does not exist")
    if cfg.max_tasks < 0:
        raise ConfigError(f"max_tasks must be >= 0, got {cfg.max_tasks}")
    cfg.eval.to_eval_config()


def load_tasks(cfg: EvaluateMemoryConfig) -> list:
    """The memory tasks the config names (generated or loaded), capped by `max_tasks`."""
    split = cfg.split or None
    if cfg.kind == "memorygym" and not cfg.path:
        g = cfg.memorygym
        tasks = [memorygym_task(MemoryGymConfig(speakers=g.speakers, sessions=g.sessions, seed=g.seed), split)]
    else:
        tasks = load_memory_tasks(cfg.kind, cfg.path, split=split)
    return tasks[: cfg.max_tasks or None]


def run(cfg: EvaluateMemoryConfig) -> dict[str, Any]:
    """Evaluate; returns the figures also written to results.json."""
    check(cfg)
    started = time.perf_counter()
    out = Path(cfg.out_dir)
    write_resolved_config(cfg, out)
    tasks = load_tasks(cfg)
    log.info("1/3 %d %s task(s), %d questions", len(tasks), cfg.kind, sum(len(t.questions) for t in tasks))
    researcher = make_backend(cfg.researcher.backend, **dict(cfg.researcher.options))
    client = make_backend(cfg.client.backend, **dict(cfg.client.options)) if cfg.client.backend else None
    tracker = Tracker(cfg.experiment, out, cfg.tracking_uri or None, pipeline="evaluate_memory")
    status = "FAILED"
    try:
        tracker.log_config(to_plain(cfg))
        log.info("2/3 the %s researcher on arms %s", cfg.researcher.backend, ", ".join(cfg.eval.arms))
        ev = evaluate_researcher(tasks, researcher, cfg.eval.to_eval_config(), client=client)
        log.info("3/3 writing results to %s", out)
        arms = ev["arms"]
        results: dict[str, Any] = {
            "kind": cfg.kind, "tasks": len(tasks), "questions": ev["n_questions"],
            "skipped_no_support": ev["skipped_no_support"],
            **{f"source_recall_{a}": s["source_recall"] for a, s in arms.items()},
            **{f"source_recall_{a}_ci": s["source_recall_ci"] for a, s in arms.items()},
            **{k: ev[k] for k in ("hierarchical_minus_flat", "hierarchical_minus_flat_ci",
                                  "latency_ratio_hierarchical_over_flat") if k in ev},
            "arms": arms, "wall_s": time.perf_counter() - started, "config": redact(to_plain(cfg)),
            "mlflow": {"tracking_uri": tracker.tracking_uri, "run_id": tracker.run_id},
        }
        results["findings"] = arm_findings(ev)
        text = arms_markdown(ev)
        print("\n" + text)
        files = [plot_arms(ev, out / "arms.png", title=f"JAM arms on {cfg.kind}"),
                 write_atomic(out / "arms.md", text),
                 write_atomic(out / "evaluation.json", json.dumps(ev, indent=2, default=str) + "\n"),
                 write_atomic(out / "results.json", json.dumps(results, indent=2, default=str) + "\n")]
        tracker.log_metrics({k: float(v) for k, v in results.items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)}, 0)
        for path in [*files, out / "config.yaml"]:
            tracker.log_file(path)
        status = "FINISHED"
        return results
    finally:
        tracker.finish(status)


def main(argv: list[str]) -> int:
    """CLI entry: `librarian evaluate_memory [--config FILE] [key=value ...]`."""
    return pipeline_main("evaluate_memory", __doc__, EvaluateMemoryConfig, run, argv, check=check)
