"""`librarian train_researcher`: the JAM researcher, verified-trajectory SFT then hint-guided GRPO on Ray (paper 002).

Reads top to bottom:
1. a generated Memory-Gym history -> the memorizer's hierarchical workspace
   (memos, group READMEs, raw sessions) and the flat raw-history store; its
   train questions feed training, its test questions the evaluation;
2. Ray (`librarian.rl.Trainer`): the placement group, the learner, a pool of
   `ResearcherRolloutWorker`s built from the `rollout` and `search` sections,
   weight sync; the workspace goes to the object store once;
3. SFT warm start (or `resume=`): the scripted researcher explores the first
   `sft.questions` training questions; trajectories whose finalized context
   holds the gold answer and whose exploration the judge accepts are kept,
   the learner fine-tunes on them (the fine-tuned policy becomes the KL
   reference) and publishes;
4. GRPO steps (`librarian.rl.loop`, the task in `researcher/steps.py`):
   `batch_size` questions x `group_size` trajectories, a hint every K_h rounds
   of training rollouts, reward = source recall of the finalized raw sources,
   the off-policy limit, `outcome_grpo` advantages, one update, publish;
   metrics to MLflow, a checkpoint every `checkpoint_every` steps;
5. evaluation (`researcher/eval.py`): the scripted researcher on every arm, then
   the trained policy on the test questions (greedy, no hints); results.json,
   the arms table and plots, all logged to MLflow.

Locally a Ray starts on this machine; under `ray job submit` it joins the
job's cluster (see docs/train_researcher.md).
"""

from __future__ import annotations

import logging
from typing import Any

from librarian.cluster.researcher_worker import ResearcherRolloutWorker
from librarian.pipelines.entry import pipeline_main
from librarian.pipelines.researcher.config import TrainResearcherConfig
from librarian.pipelines.researcher.data import build_stores, load_task
from librarian.pipelines.researcher.eval import evaluate, summarize
from librarian.pipelines.researcher.report import write_outputs
from librarian.pipelines.researcher.steps import ResearcherTask, store_ref, teacher_samples
from librarian.rl import Trainer, check

log = logging.getLogger("librarian.train_researcher")
__all__ = ["check", "main", "run"]


def run(cfg: TrainResearcherConfig) -> dict[str, Any]:
    """Train the researcher; returns the figures also written to results.json."""
    task, train, test = load_task(cfg)
    log.info("1/5 Memory-Gym: %d sessions, %d train and %d test questions -> hierarchical and flat stores",
             len(task.sessions), len(train), len(test))
    hier, construction = build_stores(cfg, task)

    log.info("2/5 Ray: learner and %d researcher rollout workers", cfg.rollout.workers)
    with Trainer(cfg, "train_researcher", ResearcherRolloutWorker, (cfg.rollout, cfg.search)) as t:
        store = store_ref(task.name, hier.workspace)
        norms = {"initial": t.session.trainable_norm()}
        log.info("3/5 verified-trajectory SFT from the scripted researcher on %d questions",
                 min(cfg.sft.questions, len(train)))
        sft = t.warm_start(lambda: teacher_samples(cfg, t.session, store, train, hier.workspace))
        norms["after_sft"] = t.session.trainable_norm()

        log.info("4/5 hint-guided GRPO: %d questions x %d trajectories a step, hints every %d rounds",
                 cfg.learner.batch_size, cfg.learner.group_size, cfg.rollout.hint_every)
        history = t.train(ResearcherTask(cfg, train, store), norms=True)
        norms["final"] = t.session.trainable_norm()

        arms: dict[str, Any] = {}
        trained: dict[str, Any] = {}
        if cfg.eval.enabled:
            log.info("5/5 evaluation on %d test questions: arms %s, and the trained policy", len(test), cfg.eval.arms)
            arms, trained = evaluate(cfg, t.session, store, task, test)
        results = t.results(history, **summarize(arms, trained, sft), construction=construction,
                            trainable_norm=norms, n_train=len(train), n_test=len(test))
        write_outputs(t.out, results, arms, t.tracker)
        return results


def main(argv: list[str]) -> int:
    """CLI entry: `librarian train_researcher [--config FILE] [key=value ...]`."""
    return pipeline_main("train_researcher", __doc__, TrainResearcherConfig, run, argv, check=check)
