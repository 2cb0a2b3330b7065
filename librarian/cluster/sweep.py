"""Run the cells of a sweep as Ray tasks: admission by resource footprint, a queue, retries, a timeline.

Each cell is one Ray task (a fresh worker process: `max_calls=1`). A cell
declares its footprint (`Footprint`: CPUs, GPUs, custom resources): the
scheduler starts the next queued cell only while the footprints of the
running cells plus its own fit in the cluster's resources (and fewer than
`max_concurrent` run); otherwise it waits. With `hold=False` (a pipeline that
places its own actors, which then reserve the footprint themselves) the task
reserves nothing and the footprint only gates admission; with `hold=True` the
task itself reserves it. A cell that raises, whose worker dies, or that runs
past `timeout_s` is retried up to `retries` times; its failure never stops
the other cells.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
SYSTEM_KEYS = ("memory", "object_store_memory")


class SweepError(ValueError):
    """A bad scheduler setting; the message names it."""


@dataclass(frozen=True)
class Footprint:
    """What one cell occupies on the cluster while it runs."""

    cpus: float = 1.0
    gpus: float = 0.0
    custom: Mapping[str, float] = field(default_factory=dict)
    hold: bool = False  # True: the cell's own task reserves the footprint (work done in the task)

    def as_dict(self) -> dict[str, float]:
        """Ray resource names -> amounts (zero amounts left out)."""
        out = {"CPU": float(self.cpus), "GPU": float(self.gpus), **{k: float(v) for k, v in self.custom.items()}}
        return {k: v for k, v in out.items() if v}

    def check(self, name: str) -> None:
        for key, value in (("cpus", self.cpus), ("gpus", self.gpus), *self.custom.items()):
            if value < 0:
                raise SweepError(f"cell {name!r}: resources.{key} must be >= 0, got {value}")


@dataclass
class Job:
    """One cell: `fn(*args)` runs in its own Ray task and returns a (picklable) value."""

    name: str
    fn: Callable[..., Any]
    args: tuple = ()
    footprint: Footprint = field(default_factory=Footprint)
    retries: int = 0
    timeout_s: float = 0.0  # 0: no limit


@dataclass
class Outcome:
    """How a cell ended: `finished` with its value, or `failed` with the last error."""

    name: str
    status: str
    value: Any = None
    attempts: int = 0
    error: str = ""
    errors: list[str] = field(default_factory=list)  # one line per failed attempt
    wall_s: float = 0.0  # the last attempt's


@dataclass(frozen=True)
class Span:
    """One attempt's run on the driver's clock (seconds since the sweep started)."""

    name: str
    attempt: int
    start: float
    end: float


def capacity() -> dict[str, float]:
    """The cluster's schedulable resources now (CPU, GPU, custom; not memory or node labels)."""
    import ray

    return {k: float(v) for k, v in ray.cluster_resources().items()
            if k not in SYSTEM_KEYS and not k.startswith("node:") and not k.startswith("accelerator_type:")}


def fits(in_use: Mapping[str, float], need: Mapping[str, float], cap: Mapping[str, float]) -> bool:
    """True when `need` on top of `in_use` stays within `cap` for every resource it names."""
    return all(in_use.get(k, 0.0) + v <= cap.get(k, 0.0) + 1e-9 for k, v in need.items())


def peak_concurrency(spans: Sequence[Span]) -> int:
    """The largest number of attempts running at one moment (an end before a start at equal times)."""
    events = sorted([(s.start, 1) for s in spans] + [(s.end, -1) for s in spans], key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


def describe(exc: BaseException) -> str:
    """One line naming a failure: the exception type and its last message line (dead workers included)."""
    import ray.exceptions as rex

    cause = exc
    if isinstance(exc, rex.RayTaskError) and exc.cause is not None:
        cause = exc.cause
    text = str(cause).strip().splitlines()
    kind = type(cause).__name__
    if isinstance(cause, rex.WorkerCrashedError | rex.NodeDiedError):
        kind = "worker died"
    elif isinstance(cause, rex.OutOfMemoryError):
        kind = "out of memory"
    return f"{kind}: {text[-1] if text else ''}".strip()


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    return fn(*args)


class Scheduler:
    """Runs `Job`s on the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self, max_concurrent: int = 0, cap: Mapping[str, float] | None = None, poll_s: float = 0.5) -> None:
        if max_concurrent < 0:
            raise SweepError(f"max_concurrent must be >= 0 (0: as many as the resources allow), got {max_concurrent}")
        self.max_concurrent = max_concurrent
        self.cap = dict(cap) if cap is not None else capacity()
        self.poll_s = poll_s
        self.spans: list[Span] = []

    def admits(self, running: int, in_use: Mapping[str, float], job: Job) -> bool:
        if self.max_concurrent and running >= self.max_concurrent:
            return False
        return running == 0 or fits(in_use, job.footprint.as_dict(), self.cap)

    def run(self, jobs: Sequence[Job], on_start: Callable[[Job, int], None] | None = None,
            on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        """Run every job; returns their outcomes in the jobs' order."""
        import ray

        names = [j.name for j in jobs]
        if len(set(names)) != len(names):
            raise SweepError(f"job names must be unique, got {names}")
        for job in jobs:
            job.footprint.check(job.name)
            if not fits({}, job.footprint.as_dict(), self.cap):
                log.warning("cell %s needs %s but the cluster has %s: it runs alone and waits for Ray",
                            job.name, job.footprint.as_dict(), self.cap)
        remote = ray.remote(max_calls=1)(_call)  # a fresh worker process per attempt
        t0 = time.perf_counter()
        queue: deque[tuple[Job, int]] = deque((j, 1) for j in jobs)
        running: dict[Any, tuple[Job, int, float]] = {}
        in_use: dict[str, float] = {}
        errors: dict[str, list[str]] = {j.name: [] for j in jobs}
        done: dict[str, Outcome] = {}

        def release(job: Job) -> None:
            for k, v in job.footprint.as_dict().items():
                in_use[k] = in_use.get(k, 0.0) - v

        def finish(job: Job, attempt: int, started: float, value: Any = None, error: str = "") -> None:
            end = time.perf_counter()
            self.spans.append(Span(job.name, attempt, started - t0, end - t0))
            release(job)
            if not error:
                done[job.name] = Outcome(job.name, "finished", value, attempt, "", errors[job.name], end - started)
            else:
                errors[job.name].append(f"attempt {attempt}: {error}")
                if attempt <= job.retries:
                    log.warning("cell %s failed (attempt %d of %d): %s; retrying", job.name, attempt,
                                job.retries + 1, error)
                    queue.append((job, attempt + 1))
                    return
                done[job.name] = Outcome(job.name, "failed", None, attempt, error, errors[job.name], end - started)
            if on_done is not None:
                on_done(done[job.name])

        while queue or running:
            while queue and self.admits(len(running), in_use, queue[0][0]):
                job, attempt = queue.popleft()
                fp = job.footprint
                opts: dict[str, Any] = {"max_retries": 0, "name": f"cell:{job.name}",
                                        "num_cpus": fp.cpus if fp.hold else 0,
                                        "num_gpus": fp.gpus if fp.hold else 0}
                if fp.hold and fp.custom:
                    opts["resources"] = dict(fp.custom)
                if on_start is not None:
                    on_start(job, attempt)
                ref = remote.options(**opts).remote(job.fn, job.args)
                running[ref] = (job, attempt, time.perf_counter())
                for k, v in fp.as_dict().items():
                    in_use[k] = in_use.get(k, 0.0) + v
            ready, _ = ray.wait(list(running), num_returns=1, timeout=self.poll_s)
            for ref in ready:
                job, attempt, started = running.pop(ref)
                try:
                    value = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - any failure of a cell is reported, not raised
                    finish(job, attempt, started, error=describe(exc))
                else:
                    finish(job, attempt, started, value=value)
            now = time.perf_counter()
            for ref, (job, attempt, started) in list(running.items()):
                if job.timeout_s and now - started > job.timeout_s:
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    finish(job, attempt, started, error=f"timed out after {job.timeout_s:g} s")
        return [done[n] for n in names]
