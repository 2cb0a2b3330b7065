"""`librarian train_builder`: the Librarian builder trained with multi-turn GRPO on Ray (paper 000).

Reads top to bottom:
1. a KBGym universe -> small builder corpora, each with hidden questions
   (training corpora from the train split, exam corpora from the others);
2. Ray (`librarian.rl.Trainer`): the placement group, the learner, a pool of
   `BuilderRolloutWorker`s built from the `rollout` and `reward` sections,
   the answerer probe pool (`probe`), weight sync; U(F_0) of every corpus;
3. SFT warm start (or `resume=`): the scripted builder builds training
   corpora (tokenized by the policy's tokenizer), builds that do not lose
   utility are kept, the learner fine-tunes on them and publishes;
4. GRPO steps (`librarian.rl.loop`, the task in `builder/steps.py`): `batch_size`
   corpora x `group_size` builds, snapshots to the probe pool every k turns
   and at the end, per-turn dense telescoping rewards, the off-policy limit,
   multi-turn GRPO advantages, one learner update, publish; metrics to
   MLflow, a checkpoint per step;
5. the exam (`builder/exam.py`): flat store vs scripted builder vs trained
   builder on the exam corpora (F1, reader actions, rho); results.json, a
   table, plots, the HTML report, all logged to MLflow.

Locally a Ray starts on this machine; on a cluster, `ray job submit --working-dir .
-- librarian train_builder ...` joins the job's cluster (its RAY_ADDRESS)
(see docs/train_builder.md).
"""

from __future__ import annotations

import logging
from typing import Any

from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.corpora import task_corpora, teacher_corpora
from librarian.pipelines.builder.exam import policy_builds, run_exam
from librarian.pipelines.builder.report import write_outputs
from librarian.pipelines.builder.steps import BuilderTask, initial_utilities, teacher_samples
from librarian.pipelines.entry import pipeline_main
from librarian.rewards.construction import ProbeService
from librarian.rl import Trainer, check

log = logging.getLogger("librarian.train_builder")
__all__ = ["check", "main", "run"]


def run(cfg: TrainBuilderConfig) -> dict[str, Any]:
    """Train the builder; returns the figures also written to results.json."""
    d = cfg.data
    log.info("1/5 KBGym universe of %d people -> %d training and %d exam corpora", d.people, d.train_corpora,
             d.exam_corpora)
    _, train, exam = task_corpora(d, exam=cfg.exam.enabled)
    teacher = teacher_corpora(d, train, cfg.sft.corpora) if cfg.sft.enabled and not cfg.sft.init_from else []

    log.info("2/5 Ray: learner, %d rollout workers, %d probe workers", cfg.rollout.workers, cfg.probe.workers)
    with Trainer(cfg, "train_builder", BuilderRolloutWorker, (cfg.rollout, cfg.reward), probe=cfg.probe) as t:
        everything = list({c.corpus_id: c for c in train + exam + teacher}.values())
        probes = ProbeService(t.session.probes, {c.corpus_id: c.questions for c in everything}, cfg.reward)
        task = BuilderTask(cfg, train, probes, initial_utilities(everything, probes))
        stages: dict[str, dict] = {}
        fresh = cfg.exam.enabled and not cfg.resume
        if fresh and cfg.exam.untrained:
            log.info("exam builds of the untrained policy")
            stages["untrained_builder"] = policy_builds(cfg, t.session, exam, "untrained", min_version=-1)

        log.info("3/5 SFT warm start %s", f"saved in {cfg.sft.init_from}" if cfg.sft.init_from
                 else "from the scripted builder's verified builds")
        sft = t.warm_start(lambda: teacher_samples(cfg, t.session, task, teacher))
        if fresh and cfg.exam.sft_only and cfg.sft.enabled:
            log.info("exam builds of the policy after SFT")
            stages["sft_builder"] = policy_builds(cfg, t.session, exam, "sft")

        log.info("4/5 GRPO: %d corpora x %d builds a step", cfg.learner.batch_size, cfg.learner.group_size)
        history = t.train(task)

        rows, exam_detail = [], {}
        if cfg.exam.enabled:
            log.info("5/5 exam: flat store vs scripted builder vs trained builder on %d corpora", len(exam))
            rows, exam_detail = run_exam(cfg, t.session, exam, probes, stages)
        results = t.results(history, sft=sft, rows=rows, exam=exam_detail, probes_run=probes.probes_run)
        write_outputs(t.out, results, t.tracker)
        return results


def main(argv: list[str]) -> int:
    """CLI entry: `librarian train_builder [--config FILE] [key=value ...]`."""
    return pipeline_main("train_builder", __doc__, TrainBuilderConfig, run, argv, check=check)
