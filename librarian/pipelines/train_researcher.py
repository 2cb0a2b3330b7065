"""`librarian train_researcher`: the JAM researcher, verified-trajectory SFT then hint-guided GRPO on Ray (paper 002).

Reads top to bottom:
1. a generated Memory-Gym history -> the memorizer's hierarchical workspace
   (memos, group READMEs, raw sessions) and the flat raw-history store; its
   train questions feed training, its test questions the evaluation;
2. Ray: the builder's topology (one placement group), `LearnerActor` and
   `WeightSync`, and a `RolloutPool` of `ResearcherRolloutWorker`s; the
   hierarchical workspace goes to the object store once (Arrow IPC + hash);
3. verified-trajectory SFT: the scripted researcher (the teacher, tokenized by
   the policy's tokenizer) researches training questions; a trajectory is
   kept when the gold answer is in its finalized context and the exploration
   judge accepts it; the learner fine-tunes on them and publishes;
4. hint-guided GRPO: per step `batch_size` questions x `group_size`
   trajectories (a hint every K_h rounds, training only), reward = source
   recall, group-normalised outcome advantages, KL to the reference, one
   update, publish; metrics to MLflow, a checkpoint per step; with
   `rollout.constrained` (the default) every policy turn is sampled under
   the tools' grammar (a short thought, then the calls), SFT's teacher turns
   are not;
5. evaluation: `evaluate_researcher` runs the scripted researcher on every
   arm (hierarchical vs flat store, no researcher, no BM25, no dense) and the
   trained policy researches the test questions on the hierarchical store
   (greedy, no hints); results.json, plots and the MLflow run.

Locally `ray.init()` starts on this machine; on a cluster:
`ray job submit --working-dir . -- librarian train_researcher ray.address=auto ...`
(see docs/train_researcher.md).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from librarian.config import ConfigError, to_plain
from librarian.pipelines.entry import write_resolved_config
from librarian.pipelines.grpo_loop import loss_text, run_grpo_steps
from librarian.pipelines.researcher_config import TrainResearcherConfig

log = logging.getLogger("librarian.train_researcher")


def check(cfg: TrainResearcherConfig) -> None:
    """Raise `ConfigError` naming the first inconsistent setting."""
    from librarian.evaluation.memory_arms import SEARCH_MODES
    from librarian.learner.advantages import ESTIMATORS

    r, d = cfg.rollout, cfg.data
    if cfg.steps < 0:
        raise ConfigError(f"steps must be >= 0, got {cfg.steps}")
    if not r.temperature > 0:
        raise ConfigError(f"rollout.temperature must be > 0 for GRPO sampling, got {r.temperature}")
    if abs(cfg.learner.temperature - r.temperature) > 1e-9:
        raise ConfigError(f"learner.temperature ({cfg.learner.temperature}) must equal rollout.temperature "
                          f"({r.temperature}): log-probs are taken at the sampling temperature")
    if cfg.learner.advantage not in ESTIMATORS:
        raise ConfigError(f"learner.advantage must be one of {', '.join(ESTIMATORS)}, got {cfg.learner.advantage!r}")
    if cfg.learner.batch_size < 1 or cfg.learner.group_size < 1:
        raise ConfigError("learner.batch_size and learner.group_size must be >= 1")
    if cfg.off_policy.stale not in ("drop", "keep") or cfg.off_policy.max_staleness < 0:
        raise ConfigError(f"off_policy needs stale in drop/keep and max_staleness >= 0, got {cfg.off_policy}")
    for name, v in (("rollout.budget", r.budget), ("rollout.max_calls_per_turn", r.max_calls_per_turn),
                    ("rollout.max_new_tokens", r.max_new_tokens), ("sft.budget", cfg.sft.budget),
                    ("data.sessions", d.sessions)):
        if v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    if not 0.0 < d.test_fraction < 1.0:
        raise ConfigError(f"data.test_fraction must be in (0, 1): the evaluation needs test questions, "
                          f"got {d.test_fraction}")
    if d.speakers < 2:
        raise ConfigError(f"data.speakers must be >= 2 (sessions are conversations), got {d.speakers}")
    if cfg.sft.enabled and cfg.sft.teacher == "jam_researcher":
        from librarian.models.scripted_researcher import ScriptedResearcher

        if r.max_calls_per_turn < ScriptedResearcher.max_calls:
            raise ConfigError(f"rollout.max_calls_per_turn must be >= {ScriptedResearcher.max_calls} with the "
                              f"jam_researcher SFT teacher (it makes up to {ScriptedResearcher.max_calls} calls a "
                              f"round; a round with more calls than allowed runs none), got {r.max_calls_per_turn}")
    if not cfg.sft.lr >= 0:
        raise ConfigError(f"sft.lr must be >= 0 (0: learner.lr), got {cfg.sft.lr}")
    if cfg.sft.max_tokens < 0 or cfg.sft.max_tokens == 1:
        raise ConfigError(f"sft.max_tokens must be 0 (no limit) or >= 2, got {cfg.sft.max_tokens}")
    if r.hint_every < 0:
        raise ConfigError(f"rollout.hint_every must be >= 0 (0: no hints), got {r.hint_every}")
    choices = {"memorizer.kind": (cfg.memorizer.kind, ("extractive", "llm")),
               "search.mode": (cfg.search.mode, SEARCH_MODES), "search.embedder": (cfg.search.embedder,
                                                                                   ("minilm", "hashing")),
               "sft.judge": (cfg.sft.judge, ("rule", "llm"))}
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    cfg.eval.to_eval_config()  # raises ConfigError naming a bad eval setting


class Session:
    """The actors of one run: the learner and the researcher rollout pool (the builder's topology)."""

    def __init__(self, cfg: TrainResearcherConfig) -> None:
        from librarian.cluster import topology
        from librarian.cluster.learner_actor import LearnerActor
        from librarian.cluster.researcher_worker import ResearcherRolloutWorker, ResearcherSpec
        from librarian.cluster.rollout_pool import RolloutPool
        from librarian.cluster.weight_sync import WeightSync

        r, s = cfg.rollout, cfg.search
        res = topology.Resources(r.cpus_per_worker, r.gpus_per_worker)
        self.started_ray = topology.start(cfg.ray, cfg.ray.learner_cpus + r.workers * r.cpus_per_worker)
        self.topo = topology.Topology(cfg.ray, res, r.workers)
        self.topo.reserve()
        import ray

        options = dict(r.options) if r.backend != "vllm" else {"model": dict(r.options).get("model", "smollm2")}
        self.learner = ray.remote(LearnerActor).options(**self.topo.learner_options()).remote(
            r.backend if r.backend != "vllm" else "hf", options, cfg.learner, r.torch_threads)
        self.spec = ResearcherSpec(r.backend, dict(r.options), r.budget, r.max_calls_per_turn, r.max_new_tokens,
                                   r.temperature, r.top_p, r.hint_every, s.mode, s.embedder, s.snippet_chars,
                                   r.memory_window, 4, r.torch_threads, r.crash, constrained=r.constrained,
                                   free_text=r.free_text, enum_paths=r.enum_paths)
        self.rollouts = RolloutPool(self.spec, self.topo.rollout_options(), max_restarts=r.max_restarts,
                                    worker_cls=ResearcherRolloutWorker)
        self.sync = WeightSync()
        ray.get(self.learner.pid.remote())
        self.rollouts.ready()

    def norm(self) -> float:
        import ray

        return float(ray.get(self.learner.trainable_norm.remote()))

    def close(self) -> None:
        import ray

        self.rollouts.close()
        ray.kill(self.learner, no_restart=True)
        self.topo.release()
        if self.started_ray:
            ray.shutdown()


def memo_fn(cfg: TrainResearcherConfig) -> Any:
    """The memorizer's memo writer: extractive, or an LLM backend's."""
    from librarian.roles.memorizer import extractive_memo, llm_memo

    m = cfg.memorizer
    if m.kind == "extractive":
        return lambda doc: extractive_memo(doc, m.max_chars)
    from librarian.models import make_backend

    return llm_memo(make_backend(m.backend, **dict(m.options)), m.max_chars)


def load_task(cfg: TrainResearcherConfig) -> tuple[Any, list, list]:
    """The Memory-Gym history and its train and test questions (with gold sessions), capped by config."""
    from librarian.datasets.memorygym import MemoryGymConfig
    from librarian.evaluation.memory_tasks import memorygym_task

    d = cfg.data
    task = memorygym_task(MemoryGymConfig(speakers=d.speakers, sessions=d.sessions, seed=d.seed,
                                          test_fraction=d.test_fraction))
    train = [q for q in task.questions if q.split == "train" and q.support]
    test = [q for q in task.questions if q.split == "test" and q.support]
    train, test = train[: d.train_questions or None], test[: d.test_questions or None]
    if not train or not test:
        raise ConfigError(f"the Memory-Gym history (speakers={d.speakers}, sessions={d.sessions}, seed={d.seed}) "
                          f"has {len(train)} train and {len(test)} test questions; raise data.sessions or change "
                          "data.test_fraction")
    return task, train, test


def warm_start(cfg: TrainResearcherConfig, s: Session, store: Any, train: list, workspace: Any) -> dict[str, Any]:
    """Verified-trajectory SFT on the scripted teacher's accepted trajectories; returns what it did."""
    import ray

    from librarian.learner.sft import verified_samples
    from librarian.pipelines.researcher_steps import canonical_ref, clip, teacher_jobs, verify

    chosen = train[: cfg.sft.questions]
    batch = s.rollouts.run(teacher_jobs(chosen, store, cfg.sft.teacher, cfg.sft.budget, cfg.seed))
    records = [r for recs in batch.values() for r in recs]
    judge = None
    if cfg.sft.judge == "llm":
        from librarian.models import make_backend
        from librarian.models.base import SamplingParams
        from librarian.rewards.exploration import LLMExplorationJudge

        model = make_backend(cfg.sft.judge_backend, **dict(cfg.sft.judge_options))
        params = SamplingParams(max_new_tokens=160, temperature=0.0)
        judge = LLMExplorationJudge(lambda p: model.generate([[{"role": "user", "content": p}]], None,
                                                             params)[0][0].text)
    verified = verify(records, {q.id: q for q in chosen}, canonical_ref(workspace), judge)
    samples, cut = clip(verified_samples(verified.trajectories, lambda _t: True), cfg.sft.max_tokens)
    out: dict[str, Any] = {**verified.summary(), "samples": len(samples), "clipped": cut, "sft_steps": 0}
    if samples:
        history = ray.get(s.learner.sft.remote(samples, cfg.sft.epochs, cfg.sft.batch_size, cfg.seed, cfg.sft.lr))
        out["sft_steps"] = len(history)
        out["sft_loss_first"], out["sft_loss_last"] = history[0]["sft_loss"], history[-1]["sft_loss"]
    else:
        log.warning("SFT: no verified teacher trajectory fits (%s); GRPO starts from the base model", out)
    return out


def grpo_step(cfg: TrainResearcherConfig, s: Session, store: Any, train: list, step: int) -> tuple[dict, Any]:
    """One hint-guided GRPO step; its metrics and the scored batch."""
    import ray

    from librarian.cluster.weight_sync import filter_stale
    from librarian.pipelines.researcher_steps import Scored, batch_metrics, samples_for, score, step_jobs

    t0 = time.perf_counter()
    jobs = step_jobs(train, store, step, cfg.learner.batch_size, cfg.learner.group_size, cfg.seed, s.sync.version,
                     cfg.rollout.hint_every > 0)
    scored = score(s.rollouts.run(jobs, s.sync.box), {q.id: q for q in train})
    t1 = time.perf_counter()
    pairs, stale = filter_stale(list(zip(scored.records, scored.rewards, strict=True)),
                                [r.policy_version for r in scored.records], s.sync.version,
                                cfg.off_policy.max_staleness, cfg.off_policy.stale)  # type: ignore[arg-type]
    kept = Scored([p[0] for p in pairs], [p[1] for p in pairs])
    samples, advantage_figures = samples_for(kept, cfg.learner.advantage, cfg.learner.gamma, cfg.learner.scale_by_std)
    metrics: dict[str, float] = {"nonzero_advantage_fraction": 0.0, **advantage_figures}
    if samples:
        metrics.update(ray.get(s.learner.step.remote(samples)))
        s.sync.publish(s.learner)
    t2 = time.perf_counter()
    metrics.update(batch_metrics(scored))
    metrics.update({"rollout_s": t1 - t0, "learn_s": t2 - t1, "samples": float(len(samples)),
                    "stale_dropped": float(stale.dropped), "rollout_failures": float(s.rollouts.failures),
                    "policy_version": float(s.sync.version), "trainable_norm": s.norm()})
    return metrics, scored


def evaluate(cfg: TrainResearcherConfig, s: Session, store: Any, task: Any, test: list) -> tuple[dict, dict]:
    """The scripted researcher on every arm (`evaluate_researcher`) and the trained policy on the hierarchical store."""
    from librarian.evaluation.memory_eval import evaluate_researcher
    from librarian.evaluation.memory_tasks import MemoryTask
    from librarian.models import make_backend
    from librarian.pipelines.researcher_steps import eval_jobs, trained_summary

    arms = evaluate_researcher([MemoryTask(task.name, task.sessions, tuple(test))],
                               make_backend("scripted", policy=cfg.sft.teacher), cfg.eval.to_eval_config(),
                               memo_fn=memo_fn(cfg))
    trained: dict[str, Any] = {}
    if cfg.eval.trained:
        asked = test[: cfg.eval.trained_questions] if cfg.eval.trained_questions else test
        jobs = eval_jobs(asked, store, s.sync.version, cfg.eval.trained_budget or cfg.rollout.budget, cfg.seed)
        records = [r for recs in s.rollouts.run(jobs, s.sync.box).values() for r in recs]
        trained = trained_summary(records, {q.id: q for q in test}, cfg.eval.n_boot, cfg.eval.seed)
    return arms, trained


def run(cfg: TrainResearcherConfig) -> dict[str, Any]:
    """Train the researcher; returns the figures also written to results.json."""
    import ray

    from librarian.cluster.rollout_worker import snapshot
    from librarian.evaluation.memory_arms import build_store
    from librarian.pipelines.researcher_report import write_outputs
    from librarian.pipelines.researcher_steps import StoreRef, trajectory_rows
    from librarian.tracking import Tracker

    check(cfg)
    started = time.perf_counter()
    out = Path(cfg.out_dir)
    write_resolved_config(cfg, out)
    task, train, test = load_task(cfg)
    log.info("1/5 Memory-Gym: %d sessions, %d train and %d test questions -> hierarchical and flat stores",
             len(task.sessions), len(train), len(test))
    hier = build_store(task.sessions, "hierarchical", memo_fn(cfg))
    flat = build_store(task.sessions, "flat")
    construction = {"hierarchical_build_s": hier.build_s, "flat_build_s": flat.build_s,
                    "hierarchical_nodes": len(hier.workspace), "flat_nodes": len(flat.workspace)}

    log.info("2/5 Ray: learner and %d researcher rollout workers", cfg.rollout.workers)
    tracker = Tracker(cfg.experiment, out, cfg.tracking_uri or None, run_name=out.name)
    tracker.log_config(to_plain(cfg))
    history: list[dict[str, float]] = []
    status = "FAILED"
    s: Session | None = None
    try:
        s = Session(cfg)
        store = StoreRef(task.name, ray.put(snapshot(hier.workspace)), hier.workspace.content_hash())
        norms = {"initial": s.norm()}
        sft: dict[str, Any] = {"sft_steps": 0}
        if cfg.sft.enabled:
            log.info("3/5 verified-trajectory SFT from the scripted researcher on %d questions",
                     min(cfg.sft.questions, len(train)))
            sft = warm_start(cfg, s, store, train, hier.workspace)
            log.info("SFT: %s", sft)
        s.sync.publish(s.learner)
        norms["after_sft"] = s.norm()
        log.info("4/5 hint-guided GRPO: %d steps, %d questions x %d trajectories, hints every %d rounds", cfg.steps,
                 cfg.learner.batch_size, cfg.learner.group_size, cfg.rollout.hint_every)
        history = run_grpo_steps(
            range(cfg.steps), lambda step: grpo_step(cfg, s, store, train, step), trajectory_rows, tracker,
            s.learner, out, cfg.save_trajectories, cfg.checkpoint_every,
            lambda step, m: (f"step {step}: source recall {m.get('reward', 0.0):.3f}, loss {loss_text(m)}, rounds "
                             f"{m.get('rounds', 0.0):.1f}, hints {m.get('hints_per_episode', 0.0):.1f}, valid calls "
                             f"{m.get('valid_call_rate', 0.0):.2f}, nonzero-advantage groups "
                             f"{m.get('nonzero_advantage_fraction', 0.0):.2f}, "
                             f"version {s.sync.version}"))
        norms["final"] = s.norm()
        arms: dict[str, Any] = {}
        trained: dict[str, Any] = {}
        if cfg.eval.enabled:
            log.info("5/5 evaluation on %d test questions: arms %s, and the trained policy", len(test), cfg.eval.arms)
            arms, trained = evaluate(cfg, s, store, task, test)
        results = summarize(cfg, arms, trained, sft, history, construction, norms)
        results.update({"policy_version": s.sync.version, "rollout_failures": s.rollouts.failures,
                        "n_train": len(train), "n_test": len(test), "wall_s": time.perf_counter() - started,
                        "mlflow": {"tracking_uri": tracker.tracking_uri, "run_id": tracker.run_id},
                        "config": to_plain(cfg)})
        write_outputs(out, results, arms, tracker)
        status = "FINISHED"
        return results
    finally:
        if s is not None:
            s.close()
        tracker.finish(status)


def summarize(cfg: TrainResearcherConfig, arms: dict, trained: dict, sft: dict, history: list, construction: dict,
              norms: dict) -> dict[str, Any]:
    """The headline figures: hierarchical vs flat source recall (with CIs), steps, the trained policy, runtime."""
    out: dict[str, Any] = {"sft_steps": int(sft.get("sft_steps", 0)), "grpo_steps": len(history), "sft": sft,
                           "trained": trained, "history": history, "construction": construction,
                           "trainable_norm": norms}
    per_arm = arms.get("arms", {})
    for arm in ("hierarchical", "flat"):
        if arm in per_arm:
            out[f"source_recall_{arm}"] = per_arm[arm]["source_recall"]
            out[f"source_recall_{arm}_ci"] = per_arm[arm]["source_recall_ci"]
    for key in ("hierarchical_minus_flat", "hierarchical_minus_flat_ci", "latency_ratio_hierarchical_over_flat"):
        if key in arms:
            out[key] = arms[key]
    out["arms"] = per_arm
    out["runtime"] = {arm: {k: a[k] for k in ("construction_s", "query_latency_s_p50", "rounds_mean",
                                              "budget_exhausted") if k in a} for arm, a in per_arm.items()}
    return out


def main(argv: list[str]) -> int:
    """CLI entry: `librarian train_researcher [--config FILE] [key=value ...]`."""
    from librarian.pipelines.entry import pipeline_main

    return pipeline_main("train_researcher", __doc__, TrainResearcherConfig, run, argv, check=check)
