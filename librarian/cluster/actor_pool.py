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
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)


class PoolError(RuntimeError):
    """The pool could not finish a batch (workers kept dying, it was closed, or a result came back twice)."""


class ActorPool:
    """`len(options)` actors `actor_cls(*args)`; `options[i]` are worker i's Ray actor options."""

    error: type[PoolError] = PoolError
    name = "worker"

    def __init__(self, actor_cls: type, args: Sequence[Any], options: Sequence[dict[str, Any]], max_restarts: int = 4,
                 inflight: int = 1) -> None:
        if not options:
            raise self.error(f"a {self.name} pool needs at least one worker")
        if inflight < 1 or max_restarts < 0:
            raise self.error(f"inflight must be >= 1 and max_restarts >= 0, got {inflight}, {max_restarts}")
        self.actor_cls = actor_cls
        self.args = tuple(args)
        self.options = [dict(o) for o in options]
        self.max_restarts = max_restarts
        self.inflight = inflight
        self.failures = 0  # worker deaths seen
        self.replaced = 0  # workers started afresh (Ray could not restart them)
        self.closed = False
        self.lives = [0] * len(self.options)  # per slot: deaths handled so far (a result from an older life is stale)
        self.workers: list[Any] = [self._spawn(i) for i in range(len(self.options))]

    def _spawn(self, slot: int) -> Any:
        import ray

        cls = ray.remote(self.actor_cls)
        return cls.options(max_restarts=self.max_restarts, max_task_retries=0, **self.options[slot]).remote(*self.args)

    def ready(self) -> list[int]:
        """Block until every worker has started; their process ids."""
        return self.call_all("pid")

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """`method(*args)` on every worker, results in slot order."""
        import ray

        return ray.get([getattr(w, method).remote(*args) for w in self.workers])

    def _recover(self, slot: int, error: Exception) -> None:
        """Wait for Ray to restart the slot's actor, else start a fresh one there."""
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        self.failures += 1
        self.lives[slot] += 1
        log.warning("%s %d died (%s); redoing its work (failure %d of at most %d)", self.name, slot,
                    type(error).__name__, self.failures, self.max_restarts)
        if self.failures > self.max_restarts:
            raise self.error(f"{self.name}s failed {self.failures} times (limit {self.max_restarts}); "
                             f"last error: {error}") from error
        worker = self.workers[slot]
        deadline = time.monotonic() + 120
        while not self.closed:
            try:
                ray.get(worker.pid.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return  # Ray restarted it
            except ActorUnavailableError:  # still restarting
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            except (RayActorError, GetTimeoutError):
                break
        if self.closed:
            raise self.error(f"the {self.name} pool was closed")
        ray.kill(worker, no_restart=True)  # gone for good: a fresh worker takes the slot
        self.workers[slot] = self._spawn(slot)
        self.replaced += 1

    def map(self, items: Sequence[Any], submit: Callable[[Any, Any], Any], size: Callable[[Any], int] = lambda _: 1,
            progress: Callable[[int, int], None] | None = None, desc: str = "") -> list[Any]:
        """`submit(worker, item)` (an object ref) for every item, each run to completion exactly once; the results
        in item order. `progress(done, total)` counts `size(item)` units (a job's builds, a chunk's episodes)."""
        import ray
        from ray.exceptions import RayActorError
        from tqdm import tqdm

        queue = deque(range(len(items)))
        results: dict[int, Any] = {}
        pending: dict[Any, tuple[int, int, int]] = {}  # ref -> (slot, life, item position)
        total, done_units = sum(size(x) for x in items), 0
        with tqdm(total=total, desc=desc or f"{self.name}s ({len(self.workers)})", leave=False,
                  disable=total < 2) as bar:
            while queue or pending:
                if self.closed:
                    raise self.error(f"the {self.name} pool was closed")
                for slot, worker in enumerate(self.workers):
                    busy = sum(1 for s, _, _ in pending.values() if s == slot)
                    while queue and busy < self.inflight:
                        i = queue.popleft()
                        pending[submit(worker, items[i])] = (slot, self.lives[slot], i)
                        busy += 1
                ready, _ = ray.wait(list(pending), num_returns=1)
                slot, life, i = pending.pop(ready[0])
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
