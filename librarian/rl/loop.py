"""The RL step loop: jobs -> rollouts -> rewards -> stale filter -> advantages -> update -> publish.

Each step's metrics go to MLflow and a progress line to the log, its
trajectories to `out/trajectories.jsonl` (appended and flushed per step, so a
resumed run continues the file), and every `checkpoint_every` steps the
learner saves `out/checkpoints/step_N` with the step in `extra`.

With `rollout.asynchronous` the rollouts run one step ahead (one-step
off-policy, as verl's one-step-off-policy recipe and AReaL do): while the
learner updates on step t, the rollout workers already generate step t+1 on
the weights published before that update, in a background thread of the
driver. Those samples are one update old when trained on; the stale filter
bounds it by `off_policy.max_staleness`, every step reports `staleness_max`
and `staleness_mean`, and the loss can correct for it with truncated
importance sampling against the rollout log-probs (`learner.loss.rollout_is`).
Every step also reports `step_s` and `learner_idle_fraction` (the share of
the step the learner was not updating or publishing).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm import tqdm

from librarian.rl.protocols import StepSession, WeightsBox
from librarian.rl.samples import keep_fresh, policy_samples
from librarian.rl.task import Scored, Task

log = logging.getLogger("librarian.rl")


class RolloutFeed:
    """Each step's rollouts: run when the step asks for them, or (`ahead`) started one step early."""

    def __init__(self, session: StepSession, task: Task, ahead: bool) -> None:
        self.session = session
        self.task = task
        self.ahead = ahead
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="rollouts") if ahead else None
        self.next: tuple[int, Future] | None = None

    def _run(self, jobs: list, weights: WeightsBox) -> tuple[dict, float, float]:
        start = time.perf_counter()
        batch = self.session.rollout(jobs, weights)
        return batch, start, time.perf_counter()

    def start(self, step: int) -> None:
        """Start step `step`'s rollouts on the latest published weights (in the background when `ahead`)."""
        jobs, weights = self.task.jobs(step, self.session.version), self.session.published()
        future: Future = Future()
        if self.executor is not None:
            future = self.executor.submit(self._run, jobs, weights)
        else:
            future.set_result(self._run(jobs, weights))
        self.next = (step, future)

    def take(self, step: int) -> tuple[list[Any], dict[str, float]]:
        """Step `step`'s records (job then group order) and `rollout_s`, `rollout_wait_s`."""
        if self.next is None or self.next[0] != step:
            self.start(step)
        assert self.next is not None
        waited = time.perf_counter()
        batch, start, end = self.next[1].result()
        self.next = None
        records = [r for recs in batch.values() for r in recs]
        return records, {"rollout_s": end - start, "rollout_wait_s": time.perf_counter() - waited}

    def close(self) -> None:
        """Stop; rollouts still running (the loop failed) are abandoned with their workers."""
        if self.executor is None:
            return
        if self.next is not None and not self.next[1].done():
            self.session.stop_rollouts()
        self.executor.shutdown(wait=True, cancel_futures=True)


def learn(session: StepSession, task: Task, cfg: Any, records: list[Any]) -> tuple[dict[str, float], Scored]:
    """Rewards, the stale filter, advantages, one update and the weight publish for one step's records (no
    update and no publish at `learner.lr` 0: the weights would not move, so an lr=0 control costs its sampling)."""
    t0 = time.perf_counter()
    rewards, details = task.turn_rewards(records)
    scored = Scored(records, rewards, details)
    t1 = time.perf_counter()
    kept, staleness = keep_fresh(scored, session.version, cfg.off_policy.max_staleness, cfg.off_policy.stale)
    samples, figures = policy_samples(kept, cfg.learner)
    metrics: dict[str, float] = {**figures, **staleness}
    t2 = time.perf_counter()
    if samples and cfg.learner.lr > 0:  # at lr 0 an update changes no weight: a control run only samples
        metrics.update(session.step(samples))
        session.publish()
    t3 = time.perf_counter()
    metrics.update(task.metrics(scored))
    metrics.update({"reward_s": t1 - t0, "update_s": t3 - t2, "learn_s": t3 - t1, "samples": float(len(samples))})
    return metrics, scored


def describe(step: int, m: dict[str, float]) -> str:
    """The step's progress line."""
    loss = f"{m['loss']:.4f}" if "loss" in m else "-"
    return (f"step {step}: reward {m.get('reward', 0.0):.3f}, loss {loss}, valid calls "
            f"{m.get('valid_call_rate', 0.0):.2f}, nonzero-advantage groups {m.get('nonzero_advantage_fraction', 0):.2f}"
            f", staleness {m.get('staleness_max', 0):.0f}, {m.get('step_s', 0.0):.1f} s (learner idle "
            f"{m.get('learner_idle_fraction', 0.0):.0%}), version {m.get('policy_version', -1):.0f}")


def run_steps(session: StepSession, task: Task, cfg: Any, steps: range, tracker: Any, out: Path,
              norms: bool = False) -> list[dict[str, float]]:
    """Run the steps; every step's metrics (with `step`). `norms`: also log the trainable weights' norm."""
    history: list[dict[str, float]] = []
    feed = RolloutFeed(session, task, ahead=cfg.rollout.asynchronous)
    rows = (out / "trajectories.jsonl").open("a", encoding="utf-8") if cfg.save_trajectories else None
    try:
        for step in tqdm(list(steps), desc="rl", unit="step"):
            start = time.perf_counter()
            records, metrics = feed.take(step)
            if feed.ahead and step + 1 < steps.stop:
                feed.start(step + 1)  # on the weights before this step's update
            learned, scored = learn(session, task, cfg, records)
            metrics.update(learned)
            wall = time.perf_counter() - start
            turns = sum(len(r.trajectory.turns) for r in records)
            metrics.update({"step": float(step), "step_s": wall, "learner_idle_fraction": max(0.0, 1 - metrics[
                "update_s"] / wall), "rollout_turns_per_s": turns / max(metrics["rollout_s"], 1e-9),
                "rollout_failures": float(session.rollout_failures), "policy_version": float(session.version)})
            if norms:
                metrics["trainable_norm"] = session.trainable_norm()
            history.append(metrics)
            tracker.log_metrics(metrics, step)
            log.info(describe(step, metrics))
            if rows is not None:
                rows.writelines(json.dumps(row, default=str) + "\n" for row in task.rows(scored, step))
                rows.flush()
            if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
                session.save(out / "checkpoints" / f"step_{step}", {"step": step})
    finally:
        feed.close()
        if rows is not None:
            rows.close()
    return history
