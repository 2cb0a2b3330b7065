"""`Trainer`: one RL run around the session: MLflow tracking, warm start or resume, the step loop, results.

    with Trainer(cfg, "train_builder", BuilderRolloutWorker, (cfg.rollout, cfg.reward), probe=cfg.probe) as t:
        sft = t.warm_start(lambda: teacher_samples(...))   # resume=..., else SFT when sft.enabled; then publish
        history = t.train(task)                            # the step loop (librarian.rl.loop)
        results = t.results(history, rows=...)             # the figures every recipe reports

The run's resolved config goes to `out_dir/config.yaml` and MLflow; the
MLflow run ends FINISHED, or FAILED when the block raised; the session is
closed either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from librarian.config import ConfigError, to_plain, write_config
from librarian.learner import checkpoint
from librarian.learner.errors import LearnerError
from librarian.redact import redact
from librarian.rl.loop import run_steps
from librarian.rl.session import RLSession
from librarian.rl.task import Task
from librarian.tracking import Tracker

log = logging.getLogger("librarian.rl")


class Trainer:
    """A recipe's run: `cfg` (an `RLConfig`), its pipeline name, its rollout worker class and that class's config
    sections, and the probe section when the recipe's rewards need an answerer probe pool."""

    def __init__(self, cfg: Any, pipeline: str, worker_cls: type, worker_args: Sequence[Any],
                 probe: Any = None) -> None:
        self.cfg = cfg
        self.pipeline = pipeline
        self.started = time.perf_counter()
        if cfg.sft.enabled and cfg.sft.init_from:
            saved_warm_start(cfg.sft.init_from)  # before Ray starts: a wrong folder fails at once
        self.out = write_config(cfg.out_dir, cfg)
        self.actors = (worker_cls, tuple(worker_args), probe)
        self.first = 0
        self.tracker: Any = None
        self.session: RLSession  # started by __enter__

    def __enter__(self) -> Trainer:
        cfg = self.cfg
        self.tracker = Tracker(cfg.experiment, self.out, cfg.tracking_uri or None, pipeline=self.pipeline)
        self.tracker.log_config(to_plain(cfg))
        try:
            self.session = RLSession(cfg.ray, cfg.rollout, cfg.learner, *self.actors)
        except BaseException:
            self.tracker.finish("FAILED")
            raise
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        try:
            self.session.close()
        finally:
            self.tracker.finish("FINISHED" if kind is None else "FAILED")

    def warm_start(self, sft: Callable[[], tuple[list, dict[str, Any]]]) -> dict[str, Any]:
        """Resume from `cfg.resume` (the learner as saved: weights, optimizer, RNG, step; training continues at the
        next step), else, with `sft.enabled`, fine-tune on `sft()`'s samples; then publish. What SFT did."""
        cfg, out = self.cfg, {}
        if cfg.resume:
            extra = self.session.load(cfg.resume)
            self.first = int(extra.get("step", -1)) + 1
            log.info("resumed from %s: continuing at step %d", cfg.resume, self.first)
        elif cfg.sft.enabled and cfg.sft.init_from:
            out = self.session.load(cfg.sft.init_from)["sft"]
            out["init_from"] = cfg.sft.init_from
            log.info("SFT: the warm start saved in %s (%s)", cfg.sft.init_from, out)
        elif cfg.sft.enabled:
            samples, out = sft()
            out.update(self.fine_tune(samples))
            if out.get("sft_steps"):
                folder = self.out / "checkpoints" / "sft"
                self.session.save(folder, {"step": -1, "sft": out})
                log.info("SFT: %s; saved in %s (sft.init_from=%s starts another run from it)", out, folder, folder)
        self.session.publish()
        return out

    def fine_tune(self, samples: list) -> dict[str, Any]:
        """SFT on `samples` (then the fine-tuned policy is the KL reference); its steps and first and last loss."""
        if not samples:
            log.warning("SFT: no verified teacher episode; training starts from the base model")
            return {"samples": 0, "sft_steps": 0}
        s = self.cfg.sft
        history = self.session.sft(samples, s.epochs, s.batch_size, self.cfg.seed, s.lr, s.eps)
        return {"samples": len(samples), "sft_steps": len(history), "sft_loss_first": history[0]["sft_loss"],
                "sft_loss_last": history[-1]["sft_loss"]}

    def train(self, task: Task, norms: bool = False) -> list[dict[str, float]]:
        """The step loop from the first step (after a resume: the next one) to `cfg.steps`."""
        cfg = self.cfg
        log.info("RL: steps %d..%d, %d prompts x %d rollouts a step%s", self.first, cfg.steps - 1,
                 cfg.learner.batch_size, cfg.learner.group_size,
                 ", rollouts one step ahead" if cfg.rollout.asynchronous else "")
        return run_steps(self.session, task, cfg, range(self.first, cfg.steps), self.tracker, self.out, norms)

    def results(self, history: list[dict[str, float]], **extra: Any) -> dict[str, Any]:
        """The figures every recipe reports, then `extra`."""
        return {"grpo_steps": len(history), "first_step": self.first, "resumed_from": self.cfg.resume or None,
                "policy_version": self.session.version, "history": history,
                "rollout_failures": self.session.rollout_failures, **extra,
                "wall_s": time.perf_counter() - self.started,
                "mlflow": {"tracking_uri": self.tracker.tracking_uri, "run_id": self.tracker.run_id},
                "config": redact(to_plain(self.cfg))}


def saved_warm_start(folder: str) -> dict[str, Any]:
    """What SFT did in the run that saved `folder` (its `checkpoints/sft`); a `ConfigError` naming
    `sft.init_from` when `folder` is not such a checkpoint."""
    try:
        header = checkpoint.read_header(folder)
    except LearnerError as exc:
        raise ConfigError(f"sft.init_from: {exc}") from None
    sft = (header.get("extra") or {}).get("sft")
    if not isinstance(sft, dict):
        raise ConfigError(f"sft.init_from: {folder} is a learner checkpoint but not a saved warm start (a run "
                          f"writes one in out_dir/checkpoints/sft after SFT; resume= continues from a step's)")
    return sft
