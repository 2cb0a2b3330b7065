"""`RolloutPool`: rollout workers sharing a queue of jobs, with fault recovery.

The workers are `BuilderRolloutWorker`s by default; any class with the same
surface (`pid`, `policy_version`, `load`, `sync`, `run(job, box)` returning
records with an `index` in group order) can be passed as `worker_cls` (the
JAM researcher's `ResearcherRolloutWorker`). A job needs `job_id` and
`group_size`.

Jobs go out one at a time per worker (`inflight` at most); a worker loads the
latest published weights before a job that needs them. When a worker dies
mid-batch (the call raises `RayActorError`), its job goes back on the queue:
Ray restarts the actor (`max_restarts`) or, once it is gone for good, the pool
starts a fresh one in its slot; the restarted worker reloads the weights and
redoes the job. Results are kept by job id, so a job whose result arrived is
never run again and a duplicate is an error: no trajectory is lost or
counted twice.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from librarian.cluster.rollout_worker import BuilderRolloutWorker, BuildJob, RolloutRecord, RolloutSpec

log = logging.getLogger(__name__)


class RolloutError(RuntimeError):
    """The pool could not finish a batch (workers kept dying, or a result came back twice)."""


class RolloutPool:
    """`len(options)` rollout actors of `worker_cls`; `options[i]` are the Ray actor options of worker i."""

    def __init__(self, spec: RolloutSpec, options: Sequence[dict[str, Any]], max_restarts: int = 4,
                 inflight: int = 1, worker_cls: type = BuilderRolloutWorker) -> None:
        if not options:
            raise RolloutError("a rollout pool needs at least one worker")
        if inflight < 1 or max_restarts < 0:
            raise RolloutError(f"inflight must be >= 1 and max_restarts >= 0, got {inflight}, {max_restarts}")
        self.spec = spec
        self.options = [dict(o) for o in options]
        self.max_restarts = max_restarts
        self.inflight = inflight
        self.worker_cls = worker_cls
        self.failures = 0
        self.replaced = 0
        self.workers: list[Any] = [self._spawn(i) for i in range(len(options))]

    def _spawn(self, slot: int) -> Any:
        import ray

        cls = ray.remote(self.worker_cls)
        return cls.options(max_restarts=self.max_restarts, max_task_retries=0, **self.options[slot]).remote(self.spec)

    def ready(self) -> list[int]:
        """Block until every worker has started; their process ids."""
        import ray

        return ray.get([w.pid.remote() for w in self.workers])

    def versions(self) -> list[int]:
        import ray

        return ray.get([w.policy_version.remote() for w in self.workers])

    def _recover(self, slot: int, worker: Any, job: BuildJob, error: Exception) -> None:
        import ray
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

        self.failures += 1
        log.warning("rollout worker %d died during job %s (%s); redoing it (failure %d of at most %d)",
                    slot, job.job_id, type(error).__name__, self.failures, self.max_restarts)
        if self.failures > self.max_restarts:
            raise RolloutError(f"rollout workers failed {self.failures} times (limit {self.max_restarts}); "
                               f"last error: {error}") from error
        if self.workers[slot] is not worker:
            return  # already replaced after an earlier failure of the same worker
        deadline = time.monotonic() + 120
        while True:
            try:
                ray.get(worker.pid.remote(), timeout=max(1.0, deadline - time.monotonic()))
                return  # Ray restarted it
            except ActorUnavailableError:  # still restarting
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            except (RayActorError, GetTimeoutError):
                break
        ray.kill(worker, no_restart=True)  # gone for good: a fresh worker takes the slot
        self.workers[slot] = self._spawn(slot)
        self.replaced += 1

    def run(self, jobs: Sequence[BuildJob], box: list | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, list[RolloutRecord]]:
        """Every job's records, by job id (each job's records in group order)."""
        import ray
        from ray.exceptions import RayActorError
        from tqdm import tqdm

        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise RolloutError(f"job ids must be unique, got {ids}")
        box = list(box or [])
        queue = deque(jobs)
        results: dict[str, list[RolloutRecord]] = {}
        pending: dict[Any, tuple[int, Any, BuildJob]] = {}
        total = sum(j.group_size for j in jobs)
        with tqdm(total=total, desc=f"rollouts ({len(self.workers)} workers)", unit="build", leave=False) as bar:
            while queue or pending:
                for slot, worker in enumerate(self.workers):
                    busy = sum(1 for s, _, _ in pending.values() if s == slot)
                    while queue and busy < self.inflight:
                        job = queue.popleft()
                        pending[worker.run.remote(job, box)] = (slot, worker, job)
                        busy += 1
                done, _ = ray.wait(list(pending), num_returns=1)
                slot, worker, job = pending.pop(done[0])
                try:
                    records = ray.get(done[0])
                except RayActorError as exc:
                    queue.appendleft(job)
                    self._recover(slot, worker, job, exc)
                    continue
                if job.job_id in results:
                    raise RolloutError(f"job {job.job_id} came back twice; the pool's bookkeeping is broken")
                if [r.index for r in records] != list(range(job.group_size)):
                    raise RolloutError(f"job {job.job_id} returned builds {[r.index for r in records]}, expected "
                                       f"0..{job.group_size - 1}")
                results[job.job_id] = records
                bar.update(len(records))
                if progress is not None:
                    progress(len(results), len(jobs))
        return {i: results[i] for i in ids}

    def close(self) -> None:
        """Stop the workers."""
        import ray

        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
