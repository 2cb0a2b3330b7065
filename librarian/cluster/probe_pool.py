"""`AnswererProbeWorker` (a Ray actor owning one reader and its search indexes) and `ProbePool` over them.

A probe is (workspace snapshot as Arrow IPC bytes, questions, `ReaderSpec`)
-> per-question `ExamResult`s. The pool puts the snapshot in the object
store once and sends workers a reference wrapped in a list, so a worker
fetches and indexes a snapshot only the first time it sees its content hash.
Questions go out in chunks, at most `inflight` per worker; results are kept
by task position, so order is the questions' order. When a worker dies
mid-batch its chunks in flight are put back on the queue, a fresh worker
takes its slot, and a chunk whose result already arrived is never run
again: no question is lost or counted twice.

    pool = ProbePool(spec, workers=2)
    results = pool.run(workspace, questions)   # or IPC bytes, or a SnapshotView
    pool.close()
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from librarian.datasets.records import Question
from librarian.evaluation.exam import (
    ExamResult,
    ExamRunner,
    ReaderSpec,
    Task,
    snapshot_bytes,
    snapshot_key,
    tasks_for,
)

log = logging.getLogger(__name__)


class ProbeError(RuntimeError):
    """The pool could not finish a probe (workers kept dying, or Ray could not start)."""


def init_ray(num_cpus: int | None = None, temp_dir: str | None = None) -> None:
    """Start a local Ray session unless one is running (no dashboard, no auth token, a short temp dir)."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp_dir = temp_dir or os.path.join(tempfile.gettempdir(), f"ray{os.getuid()}")
    ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False,
             configure_logging=False)


class AnswererProbeWorker:
    """One reader (policy backend + role) and an LRU of opened snapshots with their search indexes."""

    def __init__(self, spec: ReaderSpec, cache_size: int = 4) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.runner = ExamRunner(spec, cache_size)

    def pid(self) -> int:
        return os.getpid()

    def probe(self, key: str, box: list, tasks: Sequence[Task]) -> list[tuple[int, ExamResult]]:
        """Run `tasks` on the snapshot `key`; `box[0]` is its object reference, fetched on a cache miss."""
        if not self.runner.has(key):
            import ray

            self.runner.load(key, ray.get(box[0]))
        return self.runner.run(key, tasks)


_ACTOR: Any = None


def _actor_class() -> Any:
    global _ACTOR
    if _ACTOR is None:
        import ray

        _ACTOR = ray.remote(num_cpus=1, max_restarts=0)(AnswererProbeWorker)
    return _ACTOR


class ProbePool:
    """`workers` probe actors sharing a queue of question chunks."""

    def __init__(self, spec: ReaderSpec, workers: int = 2, chunk: int = 16, inflight: int = 2,
                 max_restarts: int = 8, num_cpus: int | None = None, temp_dir: str | None = None,
                 gpus_per_worker: float = 0.0) -> None:
        if workers < 1 or chunk < 1 or inflight < 1:
            raise ProbeError(f"workers, chunk and inflight must be >= 1, got {workers}, {chunk}, {inflight}")
        if gpus_per_worker < 0:
            raise ProbeError(f"gpus_per_worker must be >= 0, got {gpus_per_worker}")
        self.gpus_per_worker = gpus_per_worker
        spec.check()
        init_ray(num_cpus if num_cpus is not None else max(workers, os.cpu_count() or 1), temp_dir)
        self.spec = spec
        self.chunk = chunk
        self.inflight = inflight
        self.max_restarts = max_restarts
        self.restarts = 0
        self.workers: list[Any] = [self._spawn() for _ in range(workers)]

    def _spawn(self) -> Any:
        """One probe actor: one CPU, plus `gpus_per_worker` GPUs (a vLLM reader on a GPU cluster)."""
        cls = _actor_class()
        return (cls.options(num_gpus=self.gpus_per_worker) if self.gpus_per_worker else cls).remote(self.spec)

    def ready(self) -> list[int]:
        """Block until every worker has started; their process ids."""
        import ray

        return ray.get([w.pid.remote() for w in self.workers])

    def _replace(self, slot: int) -> None:
        import ray

        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise ProbeError(f"probe workers died {self.restarts} times (limit {self.max_restarts}); giving up")
        log.warning("probe worker %d died; starting a fresh one (restart %d)", slot, self.restarts)
        ray.kill(self.workers[slot], no_restart=True)
        self.workers[slot] = self._spawn()

    def run(self, store: Any, questions: Sequence[Question], repeats: int = 1,
            progress: Callable[[int, int], None] | None = None) -> list[ExamResult]:
        """Every question (x `repeats`) on the snapshot, results in question order."""
        import ray
        from ray.exceptions import RayActorError
        from tqdm import tqdm

        data = snapshot_bytes(store)
        key = snapshot_key(data)
        box = [ray.put(data)]
        tasks = tasks_for(questions, repeats)
        queue = deque(tasks[i:i + self.chunk] for i in range(0, len(tasks), self.chunk))
        results: dict[int, ExamResult] = {}
        pending: dict[Any, tuple[int, Any, list[Task]]] = {}  # ref -> (slot, worker handle, chunk)
        with tqdm(total=len(tasks), desc=f"probes ({len(self.workers)} workers)", unit="ep", leave=False,
                  disable=len(tasks) < 2) as bar:
            while queue or pending:
                for slot, worker in enumerate(self.workers):
                    busy = sum(1 for s, _, _ in pending.values() if s == slot)
                    while queue and busy < self.inflight:
                        part = queue.popleft()
                        pending[worker.probe.remote(key, box, part)] = (slot, worker, part)
                        busy += 1
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                slot, worker, part = pending.pop(ref)
                try:
                    got = ray.get(ref)
                except RayActorError:
                    queue.appendleft(part)
                    if self.workers[slot] is worker:  # the first failure seen from this worker
                        self._replace(slot)
                    continue
                for pos, res in got:
                    if pos in results:
                        raise ProbeError(f"task {pos} came back twice; the pool's bookkeeping is broken")
                    results[pos] = res
                bar.update(len(got))
                if progress is not None:
                    progress(len(results), len(tasks))
        missing = [i for i in range(len(tasks)) if i not in results]
        if missing:
            raise ProbeError(f"tasks {missing[:5]} never came back")
        return [results[i] for i in range(len(tasks))]

    def close(self) -> None:
        """Stop the workers (the Ray session stays up for the caller)."""
        import ray

        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []

    def __enter__(self) -> ProbePool:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
