"""Weight sync, the driver side: the learner publishes (version, payload); rollout workers load it before their
next batch (the worker side is `weight_sync_worker`, what both share `weight_sync_config`).

Two ways, chosen once per run (`broadcast_transport`):

- **Object store** (`WeightSync`, the default; LoRA adapters always): the
  driver keeps the latest payload in Ray's object store and hands workers a
  reference wrapped in a list, so a worker fetches the payload only when its
  own version is older.
- **Broadcast** (`BroadcastSync`, full weights with `rollout.options.
  weight_transfer` 'nccl' for vLLM engines or 'broadcast' for `hf` models):
  at session start learner rank 0 makes a sender for every worker's ranks
  (`LearnerActor.sync_open`) and every worker joins (`join_broadcast`) while
  the learner connects; each publish checks the round's tensor list on every
  worker, then the learner broadcasts the weights in packed buffers
  (`sync_send`) while every worker receives them (`receive_broadcast`). The
  transport is NCCL to vLLM engines (`weight_transfer.nccl`, vLLM's own receiver) and
  gloo to `hf` models (`weight_transfer.gloo`, on any device). The object store
  then holds only a `BroadcastNote` (version + update_info).

A worker that missed a broadcast (Ray restarted it, or the pool replaced it)
finds a note newer than its weights before its next job and pulls the
learner's weights once through the object store (`resolve`). A new process
cannot join an existing group, so the next publish rebuilds the group first
(survivors leave, the learner closes its sender and opens a new one, every
worker joins) and broadcasts to all. A worker or the learner failing during
a broadcast breaks the group (the others may be stuck in the collective):
the publish raises `WeightSyncError` naming it, and so does every later one.

Every wait here is bounded by `rollout.sync_timeout_s` (0: no limit): the
learner's payload, joining the group, a broadcast round, a missed worker's
pull; past it `waits.CallTimeoutError` (or, inside a broadcast round,
`WeightSyncError`) names the call, who did not answer and the key.

Full weights for a vLLM engine on the learner's own GPU (`weight_transfer:
'ipc'`, the colocated layout) travel as CUDA IPC handles of the learner's GPU
tensors (`WeightSync(transfer='ipc')` asks `LearnerActor.publish('ipc')`); every
other path publishes CPU copies.

Every trajectory records the version that produced it; the RL step
(`librarian.rl.samples.keep_fresh`) applies the off-policy limit to a batch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from librarian.cluster.waits import failure_reason, wait_for
from librarian.cluster.weight_sync_config import KEY, NO_LIMIT_S, BroadcastNote, WeightSyncError

log = logging.getLogger(__name__)


class WeightSync:
    """The latest published weights, held in the object store for the rollout workers; `transfer` 'ipc': CUDA IPC
    handles of the learner's GPU tensors instead of CPU copies."""

    def __init__(self, timeout_s: float = 1800.0, transfer: str = "") -> None:
        self.version = -1
        self.box: list[Any] = []
        self.timeout_s = float(timeout_s)
        self.transfer = transfer

    def publish(self, learner: Any) -> int:
        """Ask the learner actor for its weights (at most `timeout_s`); the payload stays in the object store."""
        version, ref = wait_for(learner.publish.remote(self.transfer), self.timeout_s, f"publish({self.transfer!r})",
                                learner, KEY)
        self.version = int(version)
        self.box = [ref]
        return self.version

    def close(self) -> None:
        """Nothing to release (the object store frees the payload with the last reference)."""


@dataclass
class BroadcastSync(WeightSync):
    """Full weights broadcast from learner rank 0 to every rollout worker of `pool`; see the module docstring."""

    learner: Any
    pool: Any  # an ActorPool of rollout workers (`join_broadcast`, `receive_broadcast`, ...)
    transport: str  # nccl | gloo
    dtype: str = ""  # what the weights travel as ('' keeps the learner's)
    buffer_bytes: int = 0  # 0: weight_transfer.nccl.BUFFER_BYTES
    timeout_s: float = 1800.0
    version: int = -1
    box: list = field(default_factory=list)
    lives: list = field(default_factory=list)  # the pool's worker lives when the group was built
    broken: str = ""
    rebuilds: int = 0

    def _wait(self, what: str, refs: dict[str, Any], breaks: bool = True) -> list[Any]:
        """Every named call's result; the first failure or a timeout raises, naming who, and (`breaks`: the calls
        were collectives, the others may be stuck in them) marks the group broken."""
        import ray

        names = {ref: name for name, ref in refs.items()}
        pending, out = list(names), {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=self.timeout_s or None)
            problem = ""
            if not ready:
                problem = (f"{what}: {', '.join(names[r] for r in pending)} did not finish within "
                           f"{self.timeout_s:.0f} s ({KEY})")
            else:
                try:
                    out[names[ready[0]]] = ray.get(ready[0])
                except Exception as exc:  # noqa: BLE001 - any failure leaves the others in the collective
                    problem = f"{what}: {names[ready[0]]} failed: {failure_reason(exc)}"
            if problem:
                self.broken = problem if breaks else self.broken
                raise WeightSyncError(problem)
        return [out[name] for name in refs]

    def open(self) -> None:
        """Build the group: the learner's sender for every worker's ranks, everyone joining at once."""
        workers = list(self.pool.workers)
        sizes = self._wait("asking for broadcast_ranks()", {
            f"rollout worker {i}": w.broadcast_ranks.remote() for i, w in enumerate(workers)}, breaks=False)
        limit = self.timeout_s or NO_LIMIT_S  # the group's own collectives time out too
        infos = wait_for(self.learner.sync_open.remote(sizes, self.transport, self.buffer_bytes, limit),
                         self.timeout_s, "sync_open()", self.learner, KEY)
        wait_for(self.learner.sync_connect.remote(), self.timeout_s, "sync_connect()", self.learner,
                 KEY)  # joins in a thread: the learner stays free for pulls
        what = f"joining the {self.transport} weight broadcast group"
        self._wait(what, {f"rollout worker {i}": w.join_broadcast.remote(info)
                          for i, (w, info) in enumerate(zip(workers, infos, strict=True))})
        self._wait(what, {"the learner": self.learner.sync_joined.remote(limit)})
        self.lives = list(self.pool.lives)
        self.broken = ""

    def rebuild(self, why: str = "") -> None:
        """A new group for the pool's current workers (a restarted or replaced one cannot join the old group)."""
        log.warning("%s; rebuilding the %s weight broadcast group",
                    why or f"rollout workers were restarted (lives {self.lives} -> {list(self.pool.lives)})",
                    self.transport)
        self._wait("leaving the weight broadcast group", {
            f"rollout worker {i}": w.leave_broadcast.remote() for i, w in enumerate(self.pool.workers)}, breaks=False)
        wait_for(self.learner.sync_close.remote(), self.timeout_s, "sync_close()", self.learner, KEY)
        self.rebuilds += 1
        self.open()

    def _check(self, version: int, info: dict) -> list[bool]:
        """Every worker checks the round's tensor list (a mismatch raises, naming the tensor); whether each is in
        the group."""
        return self._wait(f"checking weights version {version}", {
            f"rollout worker {i}": w.check_broadcast.remote(info) for i, w in enumerate(self.pool.workers)},
            breaks=False)

    def publish(self, learner: Any = None) -> int:
        """Broadcast the learner's current weights to every worker; the object store gets only the note."""
        import ray

        if self.broken:
            raise WeightSyncError(f"the weight broadcast group is broken ({self.broken}); restart the run from its "
                                  "last checkpoint (resume=)")
        if list(self.pool.lives) != self.lives:
            self.rebuild()
        version, info = wait_for(self.learner.sync_meta.remote(self.dtype), self.timeout_s, "sync_meta()",
                                 self.learner, KEY)
        joined = self._check(version, info)
        if not all(joined):  # Ray restarted them before the pool noticed
            self.rebuild(f"rollout workers {[i for i, j in enumerate(joined) if not j]} are not in the group")
            if not all(self._check(version, info)):
                raise WeightSyncError("a rollout worker is still not in the weight broadcast group after a rebuild")
        workers = list(self.pool.workers)
        refs = {"the learner": self.learner.sync_send.remote(self.dtype, info)}
        refs.update({f"rollout worker {i}": w.receive_broadcast.remote(version, info) for i, w in enumerate(workers)})
        self._wait(f"broadcasting weights version {version}", refs)
        self.version = int(version)
        self.box = [ray.put(BroadcastNote(self.version, info, self.learner, self.timeout_s))]
        return self.version

    def close(self) -> None:
        """Drop the learner's sender (the workers leave with their processes)."""
        import ray

        if not self.broken:
            try:
                ray.get(self.learner.sync_close.remote(), timeout=30)
            except Exception as exc:  # noqa: BLE001 - closing must not hide the run's own error
                log.warning("closing the weight broadcast group: %s", exc)
