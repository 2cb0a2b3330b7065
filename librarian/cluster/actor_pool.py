"""`ActorPool`: Ray actors of one class sharing a queue of work items, with fault recovery.

Rollout workers (`RolloutPool`: builder and researcher), and answerer probe
workers (`ProbePool`) are all this pool: `map(items, submit)` sends each item
to a free worker (at most `inflight` per worker) and returns the results in
item order. When a worker dies mid-batch (a call raises `RayActorError`), its
items in flight go back on the queue; the pool waits for Ray to restart the
actor (`max_restarts`) or, once it is gone for good, starts a fresh one in its
slot. A result is kept by item position, so an item whose result arrived is
never run again and a second result is an error: nothing is lost or counted
twice. More than `max_restarts` worker deaths in the pool's life fail the call.

Nothing waits forever: an actor's start (or restart) gets `start_timeout_s`,
one work item `call_timeout_s` (0: no limit), counted from when its worker
could start it. Past either the call fails with the pool's error naming the
worker slot, what it waited for, the resources the actor asked Ray for, and
the config key to raise (`<section>.start_timeout_s`, `<section>.call_timeout_s`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

log = logging.getLogger(__name__)
START_TIMEOUT_S = 1200.0  # a cold vLLM start of a 7B model with CUDA graph capture takes minutes
CALL_TIMEOUT_S = 3600.0  # one work item (a job's builds, a chunk of probes)


class PoolError(RuntimeError):
    """The pool could not finish a batch (workers kept dying or timed out, it was closed, or a result came back
    twice)."""


def describe_request(options: dict[str, Any]) -> str:
    """What an actor's Ray options ask for: CPUs, GPUs, custom resources, its placement-group bundle."""
    parts = [f"{float(options.get('num_cpus', 1) or 0):g} CPU"]
    if options.get("num_gpus"):
        parts.append(f"{float(options['num_gpus']):g} GPU")
    parts += [f"{float(v):g} {k}" for k, v in dict(options.get("resources") or {}).items()]
    text = ", ".join(parts)
    group = getattr(options.get("scheduling_strategy"), "placement_group", None)
    if group is not None:
        index = options["scheduling_strategy"].placement_group_bundle_index
        try:
            spec = group.bundle_specs[index] if index >= 0 else None
        except Exception:  # noqa: BLE001 - the description must not fail where it explains a failure
            spec = None
        text += f" in bundle {index} {spec} of a placement group" if index >= 0 else " in a placement group"
    return text


@dataclass
class _Clock:
    """A `map` call's timing: per slot, when its latest result came back; start probes in flight."""

    slots: int
    done: list[float] = field(default_factory=list)
    probes: dict[Any, tuple[int, int, float]] = field(default_factory=dict)  # pid ref -> (slot, life, sent at)

    def __post_init__(self) -> None:
        self.done = [0.0] * self.slots


class ActorPool:
    """`len(options)` actors `actor_cls(*args)`; `options[i]` are worker i's Ray actor options."""

    error: type[PoolError] = PoolError
    name = "worker"
    section = "pool"  # the config section whose timeout keys an error names

    def __init__(self, actor_cls: type, args: Sequence[Any], options: Sequence[dict[str, Any]], max_restarts: int = 4,
                 inflight: int = 1, start_timeout_s: float | None = None, call_timeout_s: float | None = None) -> None:
        if not options:
            raise self.error(f"a {self.name} pool needs at least one worker")
        if inflight < 1 or max_restarts < 0:
            raise self.error(f"inflight must be >= 1 and max_restarts >= 0, got {inflight}, {max_restarts}")
        self.start_timeout_s = START_TIMEOUT_S if start_timeout_s is None else float(start_timeout_s)
        self.call_timeout_s = CALL_TIMEOUT_S if call_timeout_s is None else float(call_timeout_s)
        if not self.start_timeout_s > 0 or not self.call_timeout_s >= 0:
            raise self.error(f"{self.section}.start_timeout_s must be > 0 and {self.section}.call_timeout_s >= 0 "
                             f"(0: no limit), got {self.start_timeout_s:g}, {self.call_timeout_s:g}")
        self.actor_cls = actor_cls
        self.args = tuple(args)
        self.options = [dict(o) for o in options]
        self.max_restarts = max_restarts
        self.inflight = inflight
        self.failures = 0  # worker deaths seen
        self.replaced = 0  # workers started afresh (Ray could not restart them)
        self.closed = False
        self.lives = [0] * len(self.options)  # per slot: deaths handled so far (a result from an older life is stale)
        self.started = [False] * len(self.options)  # per slot: its current actor is known to have started
        self.workers: list[Any] = [self._spawn(i) for i in range(len(self.options))]

    def _spawn(self, slot: int) -> Any:
        import ray

        cls = ray.remote(self.actor_cls)
        return cls.options(max_restarts=self.max_restarts, max_task_retries=0, **self.options[slot]).remote(*self.args)

    def timeout_error(self, slot: int, what: str, seconds: float, key: str, others: int = 0) -> PoolError:
        """The error of a wait that ran out: the pool, the slot, what it waited for, the request, the key."""
        more = f" (and {others} other worker(s))" if others else ""
        hint = " (not placed by Ray, or still starting: `ray status` lists pending demands)" \
            if key == "start_timeout_s" else ""
        return self.error(f"{self.name} pool: {self.name} {slot}{more} did not {what} within {seconds:g} s{hint}; "
                          f"it asked Ray for {describe_request(self.options[slot])}; raise "
                          f"{self.section}.{key} if it only needs longer")

    def ready(self) -> list[int]:
        """Block until every worker has started (at most `start_timeout_s`); their process ids."""
        return self._gather("pid", (), self.start_timeout_s, "start", "start_timeout_s")

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` on every worker (at most `call_timeout_s`), results in slot order."""
        return self._gather(method, args, self.call_timeout_s, f"answer {method}()", "call_timeout_s")

    def _gather(self, method: str, args: tuple, seconds: float, what: str, key: str) -> list[Any]:
        import ray

        refs = [getattr(w, method).remote(*args) for w in self.workers]
        _, late = ray.wait(refs, num_returns=len(refs), timeout=seconds or None)
        if late:
            slots = [refs.index(r) for r in late]
            raise self.timeout_error(slots[0], what, seconds, key, len(slots) - 1)
        out = ray.get(refs)
        self.started = [True] * len(self.workers)
        return out

    def _recover(self, slot: int, error: Exception) -> None:
        """Wait for Ray to restart the slot's actor, else start a fresh one there (each start: `start_timeout_s`)."""
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        self.failures += 1
        self.lives[slot] += 1
        self.started[slot] = False
        log.warning("%s %d died (%s); redoing its work (failure %d of at most %d)", self.name, slot,
                    type(error).__name__, self.failures, self.max_restarts)
        if self.failures > self.max_restarts:
            raise self.error(f"{self.name}s failed {self.failures} times (limit {self.max_restarts}); "
                             f"last error: {error}") from error
        worker = self.workers[slot]
        deadline = time.monotonic() + self.start_timeout_s
        while not self.closed:
            try:
                ray.get(worker.pid.remote(), timeout=max(0.5, deadline - time.monotonic()))
                self.started[slot] = True
                return  # Ray restarted it
            except ActorUnavailableError:  # still restarting
                if time.monotonic() > deadline:
                    raise self.timeout_error(slot, "restart", self.start_timeout_s, "start_timeout_s") from None
                time.sleep(0.5)
            except GetTimeoutError:
                raise self.timeout_error(slot, "restart", self.start_timeout_s, "start_timeout_s") from None
            except RayActorError:
                break
        if self.closed:
            raise self.error(f"the {self.name} pool was closed")
        ray.kill(worker, no_restart=True)  # gone for good: a fresh worker takes the slot
        self.workers[slot] = self._spawn(slot)
        self.replaced += 1
        started, _ = ray.wait([self.workers[slot].pid.remote()], timeout=self.start_timeout_s)
        if not started:
            raise self.timeout_error(slot, "start (a fresh worker in a dead one's place)", self.start_timeout_s,
                                     "start_timeout_s")
        self.started[slot] = True

    def map(self, items: Sequence[Any], submit: Callable[[Any, Any], Any], size: Callable[[Any], int] = lambda _: 1,
            progress: Callable[[int, int], None] | None = None, desc: str = "") -> list[Any]:
        """`submit(worker, item)` (an object ref) for every item, each run to completion exactly once; the results
        in item order. `progress(done, total)` counts `size(item)` units (a job's builds, a chunk's episodes).
        A worker not known to have started gets `start_timeout_s` to start; an item running longer than
        `call_timeout_s` (from when its worker started it, not while it queued) fails the call."""
        import ray
        from ray.exceptions import RayActorError

        queue = deque(range(len(items)))
        results: dict[int, Any] = {}
        clock = _Clock(len(self.workers))
        for slot, worker in enumerate(self.workers):  # a start probe queues ahead of the slot's items
            if not self.started[slot]:
                clock.probes[worker.pid.remote()] = (slot, self.lives[slot], time.monotonic())
        pending: dict[Any, tuple[int, int, int, float]] = {}  # ref -> (slot, life, item position, submitted at)
        total, done_units = sum(size(x) for x in items), 0
        with tqdm(total=total, desc=desc or f"{self.name}s ({len(self.workers)})", leave=False,
                  disable=total < 2) as bar:
            while queue or pending:
                if self.closed:
                    raise self.error(f"the {self.name} pool was closed")
                for slot, worker in enumerate(self.workers):
                    busy = sum(1 for s, *_ in pending.values() if s == slot)
                    while queue and busy < self.inflight:
                        i = queue.popleft()
                        pending[submit(worker, items[i])] = (slot, self.lives[slot], i, time.monotonic())
                        busy += 1
                ready, _ = ray.wait([*clock.probes, *pending], num_returns=1, timeout=self._wait_s(pending, clock))
                if not ready:
                    self._check_overdue(pending, clock)
                    continue
                if ready[0] in clock.probes:  # a worker has started (or died starting: its items will say)
                    slot, life, _ = clock.probes.pop(ready[0])
                    if life == self.lives[slot]:
                        self.started[slot] = True
                        clock.done[slot] = time.monotonic()
                    continue
                slot, life, i, _ = pending.pop(ready[0])
                clock.done[slot] = time.monotonic()
                try:
                    value = ray.get(ready[0])
                except RayActorError as exc:
                    queue.appendleft(i)
                    if life == self.lives[slot]:  # the first failure seen from this life of the worker
                        self._recover(slot, exc)
                    continue
                if i in results:
                    raise self.error(f"item {i} came back twice; the pool's bookkeeping is broken")
                results[i] = value
                done_units += size(items[i])
                bar.update(size(items[i]))
                if progress is not None:
                    progress(done_units, total)
        return [results[i] for i in range(len(items))]

    def _deadlines(self, pending: dict, clock: _Clock) -> list[tuple[float, int, str, float, str]]:
        """(deadline, slot, what, seconds, key) of each worker still starting and each item running now."""
        out = [(t + self.start_timeout_s, slot, "start", self.start_timeout_s, "start_timeout_s")
               for slot, life, t in clock.probes.values() if life == self.lives[slot] and not self.started[slot]]
        if not self.call_timeout_s:
            return out
        seen: set[int] = set()
        for slot, life, i, submitted in pending.values():  # insertion order: each slot's oldest (running) first
            if slot in seen or life != self.lives[slot] or not self.started[slot]:
                continue  # a dead life's calls fail on their own; a starting worker's deadline is its start's
            seen.add(slot)
            out.append((max(submitted, clock.done[slot]) + self.call_timeout_s, slot, f"finish work item {i}",
                        self.call_timeout_s, "call_timeout_s"))
        return out

    def _wait_s(self, pending: dict, clock: _Clock) -> float | None:
        """Seconds until the first deadline (None: nothing is bounded; 1 s while only stale calls are out)."""
        deadlines = self._deadlines(pending, clock)
        if not deadlines:
            return None if self.call_timeout_s == 0 and not clock.probes else 1.0
        return max(0.0, min(d[0] for d in deadlines) - time.monotonic())

    def _check_overdue(self, pending: dict, clock: _Clock) -> None:
        now = time.monotonic()
        for deadline, slot, what, seconds, key in self._deadlines(pending, clock):
            if now >= deadline:
                raise self.timeout_error(slot, what, seconds, key)

    def close(self) -> None:
        """Stop the workers (the Ray session stays up for the caller)."""
        import ray

        self.closed = True
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
