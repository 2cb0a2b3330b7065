"""What a Ray Tune sweep adds to Tune: a trial's placement group from its actors' bundles, per-step
reports through the tracking layer, an attempt log with per-attempt timeouts, and the timeline.

- `placement(bundles, strategy, head)`: a `PlacementGroupFactory` whose head
  bundle (the trial itself) is empty unless `head` names resources; Tune
  schedules the trial's child actors into the group (it captures child tasks),
  so a pipeline's learner, rollout and probe workers fit inside its bundles.
- `reporting_steps()`: while open, every `Tracker.log_metrics` of the
  process is also a `ray.tune.report` (what ASHA decides on).
- `AttemptLog`: a Tune callback that appends each attempt's start and end
  (status, error) to a JSON-lines file, applies the sweep's `retries` to
  every trial (restored ones too) and ends an attempt that runs past
  `timeout_s` (Tune then retries it like any failure).
"""

from __future__ import annotations

import json
import logging
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from librarian.tracking import step_listeners

log = logging.getLogger(__name__)
FINISHED, FAILED, EARLY_STOPPED, RETRY = "finished", "failed", "early_stopped", "retry"
DONE_KEY = "cell_finished"  # in a trial's last result when its pipeline returned (else Tune stopped it early)


def placement(bundles: Sequence[Mapping[str, float]], strategy: str = "PACK",
              head: Mapping[str, float] | None = None) -> Any:
    """The trial's placement group: `head` (the trial's own resources, often none) + the actors' bundles."""
    from ray.tune import PlacementGroupFactory

    parts = [{k: float(v) for k, v in b.items() if v} for b in bundles]
    return PlacementGroupFactory([dict(head or {}), *[b for b in parts if b]], strategy=strategy)


@contextmanager
def reporting_steps(last: dict[str, float]) -> Iterator[dict[str, float]]:
    """Forward each per-step logging of this process to `ray.tune.report`; `last` keeps the latest values."""
    from ray import tune

    def forward(metrics: Mapping[str, float], step: int) -> None:
        last.update(metrics)
        tune.report({**metrics, "step": step})

    with step_listeners.listening(forward):
        yield last


def describe(exc: BaseException | None) -> str:
    """One line naming a failure: the exception type and its last message line (dead workers included)."""
    if exc is None:
        return "unknown error"
    import ray.exceptions as rex

    cause = exc.cause if isinstance(exc, rex.RayTaskError) and exc.cause is not None else exc
    text = str(cause).strip().splitlines()
    kind = type(cause).__name__
    if isinstance(cause, rex.ActorDiedError | rex.WorkerCrashedError | rex.NodeDiedError):
        kind = "worker died"
    elif isinstance(cause, rex.OutOfMemoryError):
        kind = "out of memory"
    return f"{kind}: {text[-1] if text else ''}".strip().rstrip(":")


def last_error(trial: Any) -> str:
    """The error of a trial's latest attempt, from the files Tune just wrote on the driver."""
    from ray import cloudpickle

    try:
        with open(trial.pickled_error_file, "rb") as f:
            return describe(cloudpickle.load(f))
    except (OSError, TypeError, ValueError, EOFError):
        return describe(trial.get_pickled_error())


class AttemptHooks:
    """`AttemptLog`'s hooks: each attempt to a JSON-lines file, this command's retries, timeouts."""

    def __init__(self, path: str | Path, name_of: Callable[[Any], str], retries: int, timeout_s: float = 0.0,
                 session: str = "") -> None:
        self.path = Path(path)
        self.name_of = name_of
        self.retries = retries
        self.timeout_s = timeout_s
        self.session = session or f"{time.time():.3f}"
        self.running: dict[str, tuple[float, int]] = {}  # trial id -> (start, attempt)
        self.timed_out: set[str] = set()

    def _write(self, trial: Any, **fields: Any) -> None:
        rec = {"session": self.session, "cell": self.name_of(trial), "trial_id": trial.trial_id, **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=str) + "\n")

    def _end(self, trial: Any, status: str, error: str = "") -> None:
        start, attempt = self.running.pop(trial.trial_id, (time.time(), max(1, trial.num_failures)))
        if trial.trial_id in self.timed_out:
            self.timed_out.discard(trial.trial_id)
            error = f"timed out after {self.timeout_s:g} s"
        self._write(trial, event="end", attempt=attempt, status=status, start=start, end=time.time(), error=error)
        if status == RETRY:
            log.warning("cell %s failed (attempt %d of %d): %s; retrying", self.name_of(trial), attempt,
                        self.retries + 1, error)
        else:
            log.info("cell %s %s after %d attempt(s) in %.1f s%s", self.name_of(trial), status, attempt,
                     time.time() - start, f": {error}" if error else "")

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        trial.max_failures = self.retries  # this command's retries, for restored trials too
        self.running[trial.trial_id] = (time.time(), trial.num_failures + 1)
        self._write(trial, event="start", attempt=trial.num_failures + 1, start=time.time())

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, RETRY, last_error(trial))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, FAILED, last_error(trial))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, FINISHED if (trial.last_result or {}).get(DONE_KEY) else EARLY_STOPPED)

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        """End attempts past `timeout_s` by killing their trial actor (a failure Tune retries)."""
        if not self.timeout_s:
            return
        import ray

        now = time.time()
        for trial in trials:
            started = self.running.get(trial.trial_id)
            if started is None or trial.trial_id in self.timed_out or now - started[0] <= self.timeout_s:
                continue
            actor = getattr(getattr(trial, "temporary_state", None), "ray_actor", None)
            if actor is not None:
                self.timed_out.add(trial.trial_id)
                ray.kill(actor)


def __getattr__(name: str) -> Any:
    """`AttemptLog`: `AttemptHooks` as a Ray Tune `Callback`, made on first use so importing this module
    loads no Ray; kept here, so a saved Tune run config unpickles it as `tune_sweep.AttemptLog`."""
    if name != "AttemptLog":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ray.tune import Callback

    cls = types.new_class("AttemptLog", (AttemptHooks, Callback), exec_body=lambda ns: ns.update(
        __module__=__name__, __qualname__="AttemptLog", __doc__=AttemptHooks.__doc__))
    globals()["AttemptLog"] = cls
    return cls


def read_attempts(path: str | Path) -> list[dict[str, Any]]:
    """The records of an attempt log (none when it is missing; a torn last line is skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class Span:
    """One attempt's run, in seconds from the sweep's first start."""

    name: str
    attempt: int
    start: float
    end: float


def peak_concurrency(spans: Sequence[Span]) -> int:
    """The largest number of attempts running at one moment (an end before a start at equal times)."""
    events = sorted([(s.start, 1) for s in spans] + [(s.end, -1) for s in spans], key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


def unfit(needs: Mapping[str, Mapping[str, float]], capacity: Mapping[str, float]) -> list[str]:
    """One line per cell whose resources exceed `capacity` (cell name -> its total need)."""
    out = []
    for name, need in needs.items():
        short = {k: float(v) for k, v in need.items() if float(v) > capacity.get(k, 0.0) + 1e-9}
        if short:
            out.append(f"cell {name!r} needs {dict(need)} but the Ray cluster has {dict(capacity)} (short of {short})")
    return out


def capacity() -> dict[str, float]:
    """The cluster's schedulable resources now (CPU, GPU, custom; not memory or node labels). A snapshot: a
    sweep on a joined cluster never sizes its concurrency from it (the autoscaler may add nodes)."""
    import ray

    return {k: float(v) for k, v in ray.cluster_resources().items()
            if k not in ("memory", "object_store_memory") and not k.startswith(("node:", "accelerator_type:"))}
