"""`RolloutPool`: rollout workers (builder or researcher) over the fault-tolerant `ActorPool`.

The workers are `worker_cls(*args)` (`BuilderRolloutWorker(rollout, reward)`,
`ResearcherRolloutWorker(rollout, search)`); any class with their surface
(`pid`, `policy_version`, `load`, `sync`, `run(job, box)` returning records
with an `index` in group order) fits. A job needs `job_id` and `group_size`;
a worker loads the latest published weights (`box`) before a job that needs
them, and one restarted after a crash reloads them before redoing the job.
The timeouts (`start_timeout_s`, `call_timeout_s`; see `ActorPool`) are the
ones given, else the workers' rollout section's (their first argument).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from librarian.cluster.actor_pool import ActorPool, PoolError
from librarian.cluster.rollout_worker import RolloutConfig


class RolloutError(PoolError):
    """The pool could not finish a batch (workers kept dying, or a job came back wrong)."""


class RolloutPool(ActorPool):
    """Rollout actors sharing a queue of jobs; `run` returns every job's records by job id."""

    error = RolloutError
    name = "rollout worker"
    section = "rollout"

    def __init__(self, worker_cls: type, args: Sequence[Any], options: Sequence[dict[str, Any]], max_restarts: int = 4,
                 inflight: int = 1, start_timeout_s: float | None = None, call_timeout_s: float | None = None) -> None:
        spec = args[0] if args and isinstance(args[0], RolloutConfig) else None
        if spec is not None:
            start_timeout_s = spec.start_timeout_s if start_timeout_s is None else start_timeout_s
            call_timeout_s = spec.call_timeout_s if call_timeout_s is None else call_timeout_s
        super().__init__(worker_cls, args, options, max_restarts, inflight, start_timeout_s, call_timeout_s)

    def versions(self) -> list[int]:
        return self.call_all("policy_version")

    def run(self, jobs: Sequence[Any], box: list | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, list[Any]]:
        """Every job's records, by job id in job order (each job's records in group order)."""
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise RolloutError(f"job ids must be unique, got {ids}")
        box = list(box or [])
        out = self.map(jobs, lambda w, job: w.run.remote(job, box), size=lambda job: job.group_size * _parts(job),
                       progress=progress, desc=f"rollouts ({len(self.workers)} workers)")
        for job, records in zip(jobs, out, strict=True):
            if [r.index for r in records] != list(range(job.group_size)) * _parts(job):
                raise RolloutError(f"job {job.job_id} returned builds {[r.index for r in records]}, expected "
                                   f"0..{job.group_size - 1}" + (f" for each of {_parts(job)} corpora"
                                                                 if _parts(job) > 1 else ""))
        return dict(zip(ids, out, strict=True))


def _parts(job: Any) -> int:
    """How many corpora a job builds (a builder job over several corpora builds each `group_size` times)."""
    parts = getattr(job, "parts", None)
    return len(parts()) if callable(parts) else 1
