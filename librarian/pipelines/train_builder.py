"""`librarian train_builder`: the Librarian builder trained with multi-turn GRPO on Ray (paper 000).

Reads top to bottom:
1. a KBGym universe -> small builder corpora, each with hidden questions
   (training corpora from the train split, exam corpora from the others);
2. Ray: a placement group for the learner and the rollout workers, the
   `LearnerActor`, a `RolloutPool` of `BuilderRolloutWorker`s and the answerer
   `ProbePool`; U(F_0) of every corpus;
3. SFT warm start: the scripted builder builds training corpora (tokenized by
   the policy's tokenizer), builds that do not lose utility are kept, the
   learner fine-tunes on them and publishes the weights;
4. GRPO steps: workers load the latest weights, build `batch_size` corpora
   `group_size` times each (hints every K_h turns), snapshots go to the probe
   pool every k turns and at the end, per-turn dense telescoping rewards,
   the off-policy limit, multi-turn GRPO advantages, one learner update,
   publish; metrics to MLflow, a checkpoint per step;
5. the exam: flat store vs scripted builder vs trained builder on the exam
   corpora (F1, reader actions, rho); results.json, a table, plots, the HTML
   report, all logged to MLflow.

Locally `ray.init()` starts on this machine; on a cluster:
`ray job submit --working-dir . -- librarian train_builder ray.address=auto ...`
(see docs/train_builder.md).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from librarian.config import ConfigError, to_plain
from librarian.pipelines.builder_config import TrainBuilderConfig
from librarian.pipelines.entry import write_resolved_config
from librarian.pipelines.grpo_loop import loss_text, run_grpo_steps

log = logging.getLogger("librarian.train_builder")


def check(cfg: TrainBuilderConfig) -> None:
    """Raise `ConfigError` naming the first inconsistent setting."""
    if cfg.steps < 0:
        raise ConfigError(f"steps must be >= 0, got {cfg.steps}")
    if not cfg.rollout.temperature > 0:
        raise ConfigError(f"rollout.temperature must be > 0 for GRPO sampling, got {cfg.rollout.temperature}")
    if abs(cfg.learner.temperature - cfg.rollout.temperature) > 1e-9:
        raise ConfigError(f"learner.temperature ({cfg.learner.temperature}) must equal rollout.temperature "
                          f"({cfg.rollout.temperature}): log-probs are taken at the sampling temperature")
    if cfg.off_policy.stale not in ("drop", "keep") or cfg.off_policy.max_staleness < 0:
        raise ConfigError(f"off_policy needs stale in drop/keep and max_staleness >= 0, got {cfg.off_policy}")
    if cfg.learner.batch_size < 1 or cfg.learner.group_size < 1:
        raise ConfigError("learner.batch_size and learner.group_size must be >= 1")
    if cfg.rollout.budget < 1 or cfg.sft.budget < 1:
        raise ConfigError("rollout.budget and sft.budget must be >= 1")
    if cfg.rollout.content_executor not in ("extractive", "none"):
        raise ConfigError(f"rollout.content_executor must be extractive or none, got {cfg.rollout.content_executor!r}")


class Session:
    """The actors of one run: learner, rollout pool, probe pool (or an in-process prober)."""

    def __init__(self, cfg: TrainBuilderConfig) -> None:
        from librarian.cluster import topology
        from librarian.cluster.learner_actor import LearnerActor
        from librarian.cluster.rollout_pool import RolloutPool
        from librarian.cluster.rollout_worker import RolloutSpec
        from librarian.cluster.weight_sync import WeightSync

        r, p = cfg.rollout, cfg.probe
        res = topology.Resources(r.cpus_per_worker, r.gpus_per_worker)
        needed = cfg.ray.learner_cpus + r.workers * r.cpus_per_worker + p.workers
        self.started_ray = topology.start(cfg.ray, needed)
        self.topo = topology.Topology(cfg.ray, res, r.workers)
        self.topo.reserve()
        import ray

        threads = r.torch_threads
        self.learner = ray.remote(LearnerActor).options(**self.topo.learner_options()).remote(
            r.backend if r.backend != "vllm" else "hf", _learner_options(r), cfg.learner, threads)
        spec = RolloutSpec(r.backend, dict(r.options), r.budget, r.max_new_tokens, r.temperature, r.top_p,
                           cfg.reward.every, cfg.reward.max_probes, r.hint_every, r.listing_lines, threads, r.crash,
                           constrained=r.constrained, content_executor=r.content_executor)
        self.spec = spec
        self.rollouts = RolloutPool(spec, self.topo.rollout_options(), max_restarts=r.max_restarts)
        self.sync = WeightSync()
        self.pool = None
        reader = _reader_spec(cfg)
        if p.workers > 0:
            from librarian.cluster.probe_pool import ProbePool

            self.pool = ProbePool(reader, workers=p.workers, chunk=p.chunk, max_restarts=p.max_restarts,
                                  gpus_per_worker=p.gpus_per_worker)
            self.probe_run = lambda data, qs, rep: self.pool.run(data, qs, rep)
        else:
            from librarian.evaluation.exam import ExamRunner, run_local

            runner = ExamRunner(reader)
            self.probe_run = lambda data, qs, rep: run_local(data, qs, reader, rep, runner=runner)
        ray.get(self.learner.pid.remote())
        self.rollouts.ready()

    def close(self) -> None:
        import ray

        if self.pool is not None:
            self.pool.close()
        self.rollouts.close()
        ray.kill(self.learner, no_restart=True)
        self.topo.release()
        if self.started_ray:
            ray.shutdown()


def _learner_options(r: Any) -> dict:
    """The learner's base model: the rollout backend's model spec (hf options)."""
    opts = dict(r.options)
    if r.backend == "vllm":  # the learner trains the same weights with transformers
        return {"model": opts.get("model", "smollm2")}
    return opts


def _reader_spec(cfg: TrainBuilderConfig) -> Any:
    from librarian.evaluation.exam import ReaderSpec

    p = cfg.probe
    return ReaderSpec(role=p.role, backend=p.backend, options=dict(p.options), budget=p.budget, memory=p.memory,
                      max_new_tokens=p.max_new_tokens, temperature=0.0, seed=cfg.seed)


def warm_start(cfg: TrainBuilderConfig, s: Session, corpora: list, initial: dict, probes: Any) -> dict[str, Any]:
    """SFT on the scripted builder's verified builds; returns what it did."""
    import ray

    from librarian.cluster.rollout_worker import BuildJob
    from librarian.learner.sft import verified_samples
    from librarian.pipelines.builder_rewards import rollout_rewards

    chosen = corpora[: cfg.sft.corpora]
    jobs = [BuildJob(f"sft-{c.corpus_id}", c.corpus_id, c.docs, 1, cfg.seed, -1, [], True, cfg.sft.teacher,
                     cfg.sft.budget) for c in chosen]
    batch = s.rollouts.run(jobs)
    records = [r for recs in batch.values() for r in recs]
    verified = []
    for rec in records:
        w = rollout_rewards(rec, initial[rec.corpus_id], probes, cfg.reward)
        if rec.trajectory.end == "done" and w.final - w.initial >= cfg.sft.min_gain:
            verified.append(rec.trajectory)
    samples = verified_samples(verified, lambda _t: True)
    out: dict[str, Any] = {"teacher_builds": len(records), "verified": len(verified), "samples": len(samples)}
    if samples:
        history = ray.get(s.learner.sft.remote(samples, cfg.sft.epochs, cfg.sft.batch_size, cfg.seed, cfg.sft.lr))
        out["sft_steps"] = len(history)
        out["sft_loss_first"], out["sft_loss_last"] = history[0]["sft_loss"], history[-1]["sft_loss"]
    return out


def grpo_step(cfg: TrainBuilderConfig, s: Session, corpora: list, step: int, initial: dict, probes: Any
              ) -> tuple[dict[str, float], Any]:
    """One GRPO step; returns its metrics and the scored batch."""
    import ray

    from librarian.cluster.weight_sync import filter_stale
    from librarian.pipelines.builder_steps import ScoredBatch, batch_metrics, samples_for, score, step_jobs

    t0 = time.perf_counter()
    jobs = step_jobs(corpora, step, cfg.learner.batch_size, cfg.learner.group_size, cfg.seed, s.sync.version,
                     cfg.rollout.hint_every > 0)
    batch = s.rollouts.run(jobs, s.sync.box)
    t1 = time.perf_counter()
    scored = score(batch, initial, probes, cfg.reward)
    t2 = time.perf_counter()
    pairs, stale = filter_stale(list(zip(scored.records, scored.rewards, strict=True)),
                                [r.policy_version for r in scored.records], s.sync.version,
                                cfg.off_policy.max_staleness, cfg.off_policy.stale)  # type: ignore[arg-type]
    kept = ScoredBatch([p[0] for p in pairs], [p[1] for p in pairs])
    samples, advantage_figures = samples_for(kept, cfg.learner.advantage, cfg.learner.gamma, cfg.learner.scale_by_std)
    metrics: dict[str, float] = dict(advantage_figures)
    if samples:
        metrics.update(ray.get(s.learner.step.remote(samples)))
        s.sync.publish(s.learner)
    t3 = time.perf_counter()
    turns = sum(len(r.trajectory.turns) for r in scored.records)
    metrics.update(batch_metrics(scored))
    metrics.update({"rollout_s": t1 - t0, "probe_s": t2 - t1, "learn_s": t3 - t2, "samples": float(len(samples)),
                    "rollout_turns_per_s": turns / max(t1 - t0, 1e-9), "stale_dropped": float(stale.dropped),
                    "rollout_failures": float(s.rollouts.failures), "policy_version": float(s.sync.version),
                    "probes_run": float(probes.probes_run)})
    return metrics, scored


def run(cfg: TrainBuilderConfig) -> dict[str, Any]:
    """Train the builder; returns the figures also written to results.json."""
    import ray

    from librarian.pipelines.builder_corpora import task_corpora
    from librarian.pipelines.builder_exam import policy_builds, run_exam
    from librarian.pipelines.builder_report import write_outputs
    from librarian.pipelines.builder_rewards import ProbeService
    from librarian.pipelines.builder_steps import initial_utilities, trajectory_rows
    from librarian.tracking import Tracker

    check(cfg)
    started = time.perf_counter()
    out = Path(cfg.out_dir)
    write_resolved_config(cfg, out)
    d = cfg.data
    log.info("1/5 KBGym universe of %d people -> %d training and %d exam corpora", d.people, d.train_corpora,
             d.exam_corpora)
    _, train, exam = task_corpora(d, exam=cfg.exam.enabled)

    log.info("2/5 Ray: learner, %d rollout workers, %d probe workers", cfg.rollout.workers, cfg.probe.workers)
    tracker = Tracker(cfg.experiment, out, cfg.tracking_uri or None, run_name=out.name)
    tracker.log_config(to_plain(cfg))
    history: list[dict[str, float]] = []
    status = "FAILED"
    s: Session | None = None
    try:
        s = Session(cfg)
        probes = ProbeService(s.probe_run, {c.corpus_id: c.questions for c in train + exam}, cfg.reward)
        initial = initial_utilities(train + exam, probes)
        first = 0
        sft: dict[str, Any] = {}
        stages: dict[str, dict] = {}
        if cfg.exam.enabled and cfg.exam.untrained and not cfg.resume:
            log.info("exam builds of the untrained policy")
            stages["untrained_builder"] = policy_builds(cfg, s, exam, "untrained", min_version=-1)
        if cfg.resume:
            extra = ray.get(s.learner.load.remote(cfg.resume))
            first = int(extra.get("step", -1)) + 1
            log.info("resumed from %s: continuing at step %d", cfg.resume, first)
        elif cfg.sft.enabled:
            log.info("3/5 SFT warm start from the scripted builder's verified builds")
            sft = warm_start(cfg, s, train, initial, probes)
            log.info("SFT: %s", sft)
        s.sync.publish(s.learner)
        if cfg.exam.enabled and cfg.exam.sft_only and cfg.sft.enabled and not cfg.resume:
            log.info("exam builds of the policy after SFT")
            stages["sft_builder"] = policy_builds(cfg, s, exam, "sft")
        log.info("4/5 GRPO: steps %d..%d, %d corpora x %d builds per step", first, cfg.steps - 1,
                 cfg.learner.batch_size, cfg.learner.group_size)
        history = run_grpo_steps(
            range(first, cfg.steps), lambda step: grpo_step(cfg, s, train, step, initial, probes), trajectory_rows,
            tracker, s.learner, out, cfg.save_trajectories, cfg.checkpoint_every,
            lambda step, m: (f"step {step}: reward {m.get('reward', 0.0):.3f}, loss {loss_text(m)}, utility gain "
                             f"{m.get('utility_gain', 0.0):.3f}, version {s.sync.version}"))
        rows, exam_detail = [], {}
        if cfg.exam.enabled:
            log.info("5/5 exam: flat store vs scripted builder vs trained builder on %d corpora", len(exam))
            rows, exam_detail = run_exam(cfg, s, exam, probes, stages)
        results = {
            "grpo_steps": len(history), "first_step": first, "resumed_from": cfg.resume or None,
            "policy_version": s.sync.version, "sft": sft, "history": history, "rows": rows, "exam": exam_detail,
            "rollout_failures": s.rollouts.failures, "probes_run": probes.probes_run,
            "wall_s": time.perf_counter() - started, "mlflow": {"tracking_uri": tracker.tracking_uri,
                                                                "run_id": tracker.run_id}, "config": to_plain(cfg),
        }
        write_outputs(out, results, tracker)
        status = "FINISHED"
        return results
    finally:
        if s is not None:
            s.close()
        tracker.finish(status)


def main(argv: list[str]) -> int:
    """CLI entry: `librarian train_builder [--config FILE] [key=value ...]`."""
    from librarian.pipelines.entry import pipeline_main

    return pipeline_main("train_builder", __doc__, TrainBuilderConfig, run, argv, check=check)
