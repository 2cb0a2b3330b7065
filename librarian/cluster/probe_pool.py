"""`AnswererProbeWorker` (a Ray actor owning one reader and its search indexes) and `ProbePool` over them.

A probe is (workspace snapshot as Arrow IPC bytes, questions, `ReaderSpec`)
-> per-question `ExamResult`s. The pool puts the snapshot in the object
store once and sends workers a reference wrapped in a list, so a worker
fetches and indexes a snapshot only the first time it sees its content hash.
Questions go out in chunks, at most `inflight` per worker, through the
fault-tolerant `ActorPool` (a dead worker's chunks are redone, none twice);
results come back in the questions' order.

    pool = ProbePool(spec, workers=2)          # or ProbePool.of(ProbeConfig(...))
    results = pool.run(workspace, questions)   # or IPC bytes, or a SnapshotView
    per_snapshot = pool.run_many([(key, data, questions), ...])  # many snapshots, one map
    pool.close()

`ProbeConfig` is a training pipeline's `probe` section: the reader itself
(a `ReaderSpec`) plus the pool's size, chunking and timeouts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from librarian.cluster.actor_pool import ActorPool, PoolError
from librarian.cluster.ray_init import connect
from librarian.cluster.topology import check_engine_gpus, check_engine_start
from librarian.config import ConfigError
from librarian.datasets.records import Question
from librarian.rewards.probe_exam import (
    ExamError,
    ExamResult,
    ExamRunner,
    ExamTask,
    ReaderSpec,
    snapshot_bytes,
    snapshot_key,
    tasks_for,
)


class ProbeError(PoolError):
    """The pool could not finish a probe (workers kept dying, or Ray could not start)."""


def init_ray(num_cpus: int | None = None, temp_dir: str | None = None, address: str = "") -> None:
    """Join the cluster `address` or $RAY_ADDRESS names, else start a local Ray (`librarian.cluster.ray_init`)."""
    connect(address, num_cpus=num_cpus, temp_dir=temp_dir or "")


class AnswererProbeWorker:
    """One reader (policy backend + role) and an LRU of opened snapshots with their search indexes."""

    def __init__(self, spec: ReaderSpec, cache_size: int = 4) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.runner = ExamRunner(spec, cache_size)

    def pid(self) -> int:
        return os.getpid()

    def probe(self, key: str, box: list, tasks: Sequence[ExamTask]) -> list[tuple[int, ExamResult]]:
        """Run `tasks` on the snapshot `key`; `box[0]` is its object reference, fetched on a cache miss."""
        if not self.runner.has(key):
            import ray

            self.runner.load(key, ray.get(box[0]))
        return self.runner.run(key, tasks)


@dataclass
class ProbeConfig(ReaderSpec):
    """A pipeline's answerer probe pool: the reader (every `ReaderSpec` field) and the pool around it."""

    budget: int = 8  # the answerer's actions per probe question (paper 001's M)
    workers: int = 1  # 0: probe in the driver process (no Ray actor)
    gpus_per_worker: float = 0.0  # for GPU presets; the pool's workers take one CPU each
    chunk: int = 16  # questions a call
    max_restarts: int = 8
    start_timeout_s: float = 1200.0  # a worker's start or restart (> a vLLM engine's own limit, 900 s by default)
    call_timeout_s: float = 3600.0  # one chunk of questions on one worker (0: no limit)

    def __post_init__(self) -> None:
        if self.workers < 0 or self.chunk < 1 or self.gpus_per_worker < 0 or self.budget < 1:
            raise ConfigError(f"probe.workers must be >= 0, probe.chunk and probe.budget >= 1 and "
                              f"probe.gpus_per_worker >= 0, got {self.workers}, {self.chunk}, {self.budget}, "
                              f"{self.gpus_per_worker}")
        if not self.start_timeout_s > 0 or not self.call_timeout_s >= 0:
            raise ConfigError(f"probe.start_timeout_s must be > 0 and probe.call_timeout_s >= 0 (0: no limit), "
                              f"got {self.start_timeout_s}, {self.call_timeout_s}")
        try:
            self.check()
        except ExamError as exc:
            raise ConfigError(f"probe: {exc}") from None
        check_engine_gpus("probe", self.backend, self.options, self.gpus_per_worker)
        check_engine_start("probe", self.backend, self.options, self.start_timeout_s)


class ProbePool(ActorPool):
    """`workers` probe actors (one CPU each, plus `gpus_per_worker`) sharing a queue of question chunks."""

    error = ProbeError
    name = "probe worker"
    section = "probe"

    def __init__(self, spec: ReaderSpec, workers: int = 2, chunk: int = 16, inflight: int = 2,
                 max_restarts: int = 8, num_cpus: int | None = None, temp_dir: str | None = None,
                 gpus_per_worker: float = 0.0, start_timeout_s: float | None = None,
                 call_timeout_s: float | None = None) -> None:
        if workers < 1 or chunk < 1 or inflight < 1:
            raise ProbeError(f"workers, chunk and inflight must be >= 1, got {workers}, {chunk}, {inflight}")
        if gpus_per_worker < 0:
            raise ProbeError(f"gpus_per_worker must be >= 0, got {gpus_per_worker}")
        spec.check()
        init_ray(num_cpus if num_cpus is not None else max(workers, os.cpu_count() or 1), temp_dir)
        self.spec = spec
        self.chunk = chunk
        resources = {"num_cpus": 1, **({"num_gpus": gpus_per_worker} if gpus_per_worker else {})}
        super().__init__(AnswererProbeWorker, (spec,), [resources] * workers, max_restarts, inflight,
                         start_timeout_s, call_timeout_s)

    @classmethod
    def of(cls, cfg: ProbeConfig) -> ProbePool:
        """The pool a `probe` config section describes (the section is the workers' reader spec)."""
        return cls(cfg, workers=cfg.workers, chunk=cfg.chunk, max_restarts=cfg.max_restarts,
                   gpus_per_worker=cfg.gpus_per_worker, start_timeout_s=cfg.start_timeout_s,
                   call_timeout_s=cfg.call_timeout_s)

    def run(self, store: Any, questions: Sequence[Question], repeats: int = 1,
            progress: Callable[[int, int], None] | None = None) -> list[ExamResult]:
        """Every question (x `repeats`) on the snapshot, results in question order."""
        data = snapshot_bytes(store)
        return self.run_many([(snapshot_key(data), data, questions)], repeats, progress)[0]

    def run_many(self, snapshots: Sequence[tuple[str, bytes, Sequence[Question]]], repeats: int = 1,
                 progress: Callable[[int, int], None] | None = None) -> list[list[ExamResult]]:
        """Every (content hash, IPC bytes, questions)'s questions (x `repeats`), all in one map over the workers;
        per snapshot, its results in question order. Each snapshot goes to the object store once."""
        import ray

        items: list[tuple[int, str, list, list[ExamTask]]] = []  # (snapshot, its hash, its box, a chunk of its tasks)
        sizes = []
        for n, (key, data, questions) in enumerate(snapshots):
            box = [ray.put(data)]
            tasks = tasks_for(questions, repeats)
            sizes.append(len(tasks))
            items += [(n, key, box, tasks[i:i + self.chunk]) for i in range(0, len(tasks), self.chunk)]
        got = self.map(items, lambda w, item: w.probe.remote(item[1], item[2], item[3]), size=lambda item: len(item[3]),
                       progress=progress, desc=f"probes ({len(self.workers)} workers)")
        results: list[dict[int, ExamResult]] = [{} for _ in snapshots]
        returned = [0] * len(snapshots)
        for (n, *_), part in zip(items, got, strict=True):
            results[n].update(part)
            returned[n] += len(part)
        out = []
        for n, size in enumerate(sizes):
            missing = [i for i in range(size) if i not in results[n]]
            if missing or len(results[n]) != returned[n]:
                raise ProbeError(f"tasks {missing[:5]} never came back, or a task came back twice")
            out.append([results[n][i] for i in range(size)])
        return out
