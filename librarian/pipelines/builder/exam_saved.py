"""`librarian exam_builder`: the builder exam of a saved policy, on corpora of any universe.

    librarian exam_builder checkpoint=RUN/checkpoints/final [data.exam_seeds=[701,702]] [out_dir=DIR]

Reads top to bottom:
1. the config: the run's own (`RUN/config.yaml`, beside the checkpoints folder) unless `--config` names one,
   with any `key=value` over it, so `data.exam_seeds` (or `data.seed`) points the exam at universes no run has
   seen; `checkpoint` is a step checkpoint (`checkpoints/step_N`, `checkpoints/final`) or a warm start
   (`checkpoints/sft`); the results go to `out_dir` (default `RUN/exam`);
2. the exam corpora (and the keep set) of those universes, checked for headroom as a run checks them
   (`builder/corpus_sets.py`);
3. Ray: the rollout workers and the probe pool; with `exam.untrained: true` the base model builds first;
4. the saved policy's weights, published to the workers;
5. the exam (`builder/exam.py`): flat store, scripted builder and the saved policy (greedy and `exam.samples`
   sampled builds), solve and break rates with corpus-clustered CIs; results.json, results.md, report.html.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.config import ConfigError, load_config, split_args
from librarian.learner import checkpoint as checkpoints
from librarian.learner.errors import LearnerError
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.corpora import CorpusError
from librarian.pipelines.builder.corpus_sets import corpus_sets
from librarian.pipelines.builder.exam import policy_builds, run_exam
from librarian.pipelines.builder.report import write_outputs
from librarian.pipelines.entry import pipeline_main
from librarian.rewards.construction import ProbeService
from librarian.rl import Trainer, check

log = logging.getLogger("librarian.exam_builder")


@dataclass
class ExamBuilderConfig(TrainBuilderConfig):
    """A `train_builder` config plus the saved policy to examine."""

    checkpoint: str = ""  # a learner checkpoint folder of a train_builder run (checkpoints/final, step_N or sft)


def run(cfg: ExamBuilderConfig) -> dict[str, Any]:
    """Examine the saved policy; returns the figures also written to results.json."""
    log.info("1/4 exam corpora of universes %s", list(cfg.data.exam_seeds) or [cfg.data.seed])
    try:
        sets = corpus_sets(cfg, exam=True, only_exam=True)
    except CorpusError as exc:
        raise ConfigError(str(exc)) from None
    exam, keep = sets.exam, sets.keep
    log.info("2/4 Ray: %d rollout workers, %d probe workers", cfg.rollout.workers, cfg.probe.workers)
    with Trainer(cfg, "exam_builder", BuilderRolloutWorker, (cfg.rollout, cfg.reward), probe=cfg.probe) as t:
        probes = ProbeService(t.session.probes, {c.corpus_id: c.questions for c in exam + keep}, cfg.reward)
        stages: dict[str, dict] = {}
        if cfg.exam.untrained:
            stages["untrained_builder"] = policy_builds(cfg, t.session, exam + keep, "untrained", min_version=-1)
        log.info("3/4 the saved policy: %s", cfg.checkpoint)
        saved = t.session.load(cfg.checkpoint)
        t.session.publish()
        log.info("4/4 exam: %d hard and %d keep corpora", len(exam), len(keep))
        rows, detail = run_exam(cfg, t.session, exam, probes, stages, keep=keep)
        results = t.results([], checkpoint=cfg.checkpoint, checkpoint_step=saved.get("step"), rows=rows,
                            exam=detail, corpora={"exam": [c.corpus_id for c in exam],
                                                  "keep": [c.corpus_id for c in keep]})
        write_outputs(t.out, results, t.tracker)
        return results


def load(argv: Sequence[str]) -> ExamBuilderConfig:
    """The config: `--config` files if given, else the checkpoint's run config (RUN/config.yaml), then
    `key=value`s; the checkpoint must be a learner checkpoint folder; no training runs (steps 0, no SFT) and the
    exam does."""
    files, overrides = split_args(argv)
    given = dict(o.split("=", 1) for o in overrides if "=" in o)
    folder = given.get("checkpoint", "")
    if not folder:
        raise ConfigError("exam_builder needs checkpoint=DIR: a train_builder run's checkpoints/final (or step_N, sft)")
    try:
        header = checkpoints.read_header(folder)
    except LearnerError as exc:
        raise ConfigError(f"checkpoint: {exc}") from None
    run_config = Path(folder).resolve().parent.parent / "config.yaml"
    if not files and not run_config.is_file():
        raise ConfigError(f"checkpoint: {folder} has no run config beside it ({run_config}); name one with --config")
    out = [] if "out_dir" in given else [f"out_dir={Path(folder).resolve().parent.parent / 'exam'}"]
    cfg = load_config(ExamBuilderConfig, [*argv, *out, "steps=0", "sft.enabled=false", "resume=''",
                                            "exam.enabled=true"],
                      config_file=None if files else run_config)
    log.debug("checkpoint %s at step %s", folder, header.get("step"))
    return cfg


def main(argv: list[str]) -> int:
    """CLI entry: `librarian exam_builder checkpoint=DIR [--config FILE] [key=value ...]`."""
    return pipeline_main("exam_builder", __doc__, ExamBuilderConfig, run, argv, check=check, load=load)
