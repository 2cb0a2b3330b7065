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
from librarian.config import ConfigError
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.corpora import CorpusError
from librarian.pipelines.builder.corpus_sets import corpus_sets
from librarian.pipelines.builder.exam import policy_builds, run_exam
from librarian.pipelines.builder.gate import warm_start_gate
from librarian.pipelines.builder.report import write_outputs
from librarian.pipelines.builder.steps import BuilderTask, initial_utilities, teacher_samples
from librarian.pipelines.entry import pipeline_main
from librarian.rewards.construction import ProbeService
from librarian.rl import Trainer, check

log = logging.getLogger("librarian.train_builder")
EXAM_SAMPLES = "exam_samples.jsonl"  # the trained policy's sampled exam builds, token by token
__all__ = ["check", "main", "run"]


def run(cfg: TrainBuilderConfig) -> dict[str, Any]:
    """Train the builder; returns the figures also written to results.json."""
    d = cfg.data
    log.info("1/5 KBGym universes -> training, exam and SFT corpora%s", " (each checked for headroom)"
             if d.headroom else "")
    try:
        sets = corpus_sets(cfg, exam=cfg.exam.enabled)
    except CorpusError as exc:
        raise ConfigError(str(exc)) from None
    train, exam, keep = sets.train, sets.exam, sets.keep

    log.info("2/5 Ray: learner, %d rollout workers, %d probe workers", cfg.rollout.workers, cfg.probe.workers)
    with Trainer(cfg, "train_builder", BuilderRolloutWorker, (cfg.rollout, cfg.reward), probe=cfg.probe) as t:
        everything = sets.everything()
        probes = ProbeService(t.session.probes, {c.corpus_id: c.questions for c in everything}, cfg.reward)
        task = BuilderTask(cfg, train, probes, initial_utilities(everything, probes))
        stages: dict[str, dict] = {}
        fresh = cfg.exam.enabled and not cfg.resume
        if fresh and cfg.exam.untrained:
            log.info("exam builds of the untrained policy")
            stages["untrained_builder"] = policy_builds(cfg, t.session, exam + keep, "untrained", min_version=-1)

        log.info("3/5 SFT warm start %s", f"saved in {cfg.sft.init_from}" if cfg.sft.init_from
                 else "from the scripted builder's verified builds")
        sft = t.warm_start(lambda: teacher_samples(cfg, t.session, task, sets.teacher))
        if fresh and cfg.exam.sft_only and cfg.sft.enabled:
            log.info("exam builds of the policy after SFT")
            stages["sft_builder"] = policy_builds(cfg, t.session, exam + keep, "sft")
        gate = warm_start_gate(cfg, t.session, sets.gate, probes) if not cfg.resume else {}

        log.info("4/5 GRPO: %d corpora x %d builds a step", cfg.learner.batch_size, cfg.learner.group_size)
        history = t.train(task)
        final = save_final(cfg, t)

        rows, exam_detail = [], {}
        if cfg.exam.enabled:
            log.info("5/5 exam: flat store vs scripted builder vs trained builder on %d hard and %d keep corpora",
                     len(exam), len(keep))
            rows, exam_detail = run_exam(cfg, t.session, exam, probes, stages, keep=keep,
                                         samples_path=t.out / EXAM_SAMPLES)
        results = t.results(history, sft=sft, gate=gate, final_checkpoint=final, rows=rows, exam=exam_detail,
                            probes_run=probes.probes_run, corpora=corpus_summary(sets))
        write_outputs(t.out, results, t.tracker)
        return results


def save_final(cfg: TrainBuilderConfig, t: Trainer) -> str | None:
    """The trained policy saved as `out_dir/checkpoints/final` (a step checkpoint: `resume=` continues from it, and
    the exam of a saved policy loads it), unless the step loop saved the last step already."""
    if cfg.steps <= t.first:
        return None
    last = cfg.steps - 1
    if cfg.checkpoint_every and (last + 1) % cfg.checkpoint_every == 0:
        return str(t.out / "checkpoints" / f"step_{last}")
    return str(t.session.save(t.out / "checkpoints" / "final", {"step": last}))


def corpus_summary(sets: Any) -> dict[str, Any]:
    """Which corpora each set holds, and for checked ones the flat store's and the teacher's utility."""
    ids = {name: [c.corpus_id for c in getattr(sets, name)] for name in ("train", "exam", "keep", "teacher", "gate")}
    return {**ids, "checks": {cid: {"flat": c.flat, "scripted": c.scripted} for cid, c in sets.checks.items()}}


def main(argv: list[str]) -> int:
    """CLI entry: `librarian train_builder [--config FILE] [key=value ...]`."""
    return pipeline_main("train_builder", __doc__, TrainBuilderConfig, run, argv, check=check)
