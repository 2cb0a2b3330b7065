"""The GRPO step loop both training pipelines share: metrics to MLflow, trajectories to JSONL, checkpoints."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tqdm import tqdm

log = logging.getLogger("librarian.grpo")

StepFn = Callable[[int], "tuple[dict[str, float], Any]"]


def run_grpo_steps(steps: Iterable[int], step_fn: StepFn, rows_fn: Callable[[Any, int], Iterable[dict]],
                   tracker: Any, learner: Any, out: Path, save_trajectories: bool, checkpoint_every: int,
                   describe: Callable[[int, dict[str, float]], str]) -> list[dict[str, float]]:
    """Run `step_fn(step)` for each step; returns every step's metrics (with `step`).

    Each step's metrics go to `tracker`, a progress line (`describe`) to the
    log, the scored batch's rows (`rows_fn`) to `out/trajectories.jsonl`
    (appended, flushed per step, so a resumed run continues the file), and
    every `checkpoint_every` steps the learner actor saves
    `out/checkpoints/step_N` (0: never).
    """
    import ray

    history: list[dict[str, float]] = []
    traj_file = (out / "trajectories.jsonl").open("a", encoding="utf-8") if save_trajectories else None
    try:
        for step in tqdm(list(steps), desc="grpo", unit="step"):
            metrics, scored = step_fn(step)
            metrics["step"] = float(step)
            history.append(metrics)
            tracker.log_metrics(metrics, step)
            log.info(describe(step, metrics))
            if traj_file is not None:
                for row in rows_fn(scored, step):
                    traj_file.write(json.dumps(row, default=str) + "\n")
                traj_file.flush()
            if checkpoint_every and (step + 1) % checkpoint_every == 0:
                ray.get(learner.save.remote(str(out / "checkpoints" / f"step_{step}"), {"step": step}))
    finally:
        if traj_file is not None:
            traj_file.close()
    return history


def loss_text(metrics: dict[str, float]) -> str:
    """The step's loss for a log line ('-' when the step had no samples to learn from)."""
    return f"{metrics['loss']:.4f}" if "loss" in metrics else "-"
