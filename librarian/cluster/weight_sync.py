"""Weight sync: the learner publishes (version, payload); rollout workers load it before their next batch.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from librarian.cluster.waits import failure_reason, wait_for
from librarian.learner.weights import load_weights
from librarian.models.weight_transfer.gloo import GlooReceiver, check_fits, load_into
from librarian.models.weight_transfer.nccl import meta_of

log = logging.getLogger(__name__)
KEY = "rollout.sync_timeout_s"
NO_LIMIT_S = 7 * 24 * 3600.0  # what a process group's timeout becomes when the key is 0 (no limit)
MODES = {"vllm": "nccl", "hf": "broadcast"}  # the weight_transfer value that broadcasts, per rollout backend


class WeightSyncError(RuntimeError):
    """A worker could not load published weights, or the broadcast group failed; the message names who."""


def apply_weights(backend: Any, payload: Any) -> int:
    """Load `payload` into a rollout backend: its own `load_weights` (vllm) or the learner's (hf)."""
    own = getattr(backend, "load_weights", None)
    if callable(own):
        return int(own(payload))

    return load_weights(backend, payload)


def backend_options(backend: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` for `make_backend(backend, ...)`: `weight_transfer` is the vLLM engine's own option; for other
    backends it only selects the sync (`broadcast_transport`) and is dropped."""
    opts = dict(options)
    if backend != "vllm":
        opts.pop("weight_transfer", None)
    return opts


def broadcast_transport(backend: str, options: Mapping[str, Any], lora: bool, device: str) -> str:
    """'nccl' or 'gloo' when the run's full weights go by broadcast, '' for the object store.

    vLLM engines with `weight_transfer: nccl` receive over NCCL (the learner on a GPU); `hf` models with
    `weight_transfer: broadcast` over gloo (any device). LoRA adapters always travel through the object store."""
    mode = str(options.get("weight_transfer", "") or "")
    if lora or mode not in ("nccl", "broadcast"):
        return ""
    if MODES.get(backend) != mode:
        allowed = ", ".join(f"{b}: {m}" for b, m in MODES.items())
        raise WeightSyncError(f"rollout.options.weight_transfer {mode!r} does not broadcast to rollout backend "
                              f"{backend!r} (per backend: {allowed})")
    if backend == "vllm":
        if not str(device).startswith("cuda"):
            raise WeightSyncError(f"weight_transfer 'nccl' to vLLM engines needs the learner on a GPU "
                                  f"(learner.device cuda), got {device!r}; use weight_transfer 'file' on CPU")
        return "nccl"
    return "gloo"


@dataclass(frozen=True)
class BroadcastNote:
    """What the object store holds under broadcast sync: the version and tensor list of the last round, and the
    learner to pull from when a worker missed it."""

    version: int
    update_info: dict
    learner: Any = None
    timeout_s: float = 1800.0  # a missed worker's pull (rollout.sync_timeout_s)


def resolve(payload: Any) -> Any:
    """A loadable payload: a `BroadcastNote` becomes the learner's current weights, pulled through the object store
    (a worker that missed the broadcast); anything else is returned as it is."""
    if not isinstance(payload, BroadcastNote):
        return payload

    if payload.learner is None:
        raise WeightSyncError(f"missed broadcast version {payload.version} and the note names no learner to pull from")
    log.warning("this worker missed broadcast version %d (restarted?); pulling the learner's weights once through "
                "the object store", payload.version)
    _, ref = wait_for(payload.learner.publish.remote(), payload.timeout_s, "publish() (a missed broadcast's pull)",
                      payload.learner, KEY)
    return wait_for(ref, payload.timeout_s, "fetching the learner's weights", payload.learner, KEY)


class BroadcastEndpoint:
    """A rollout worker's end of the learner's broadcast group: a vLLM engine's own NCCL receiver
    (`init_nccl`/`receive_nccl`) or a `GlooReceiver` that loads into the backend's local model (hf)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.vllm = callable(getattr(backend, "init_nccl", None))
        self.receiver: Any = None
        self.joined = False

    def ranks(self) -> int:
        """The ranks this worker adds to the group: a vLLM engine's tensor x pipeline parallel size, else 1."""
        return int(self.backend.nccl_ranks()) if self.vllm else 1

    def _model(self) -> Any:
        model = getattr(self.backend, "model", None)
        if model is None:
            raise WeightSyncError(f"rollout backend {type(self.backend).__name__} has no local model to receive "
                                  "broadcast weights into")
        return model

    def join(self, init_info: dict) -> None:
        """Join a (new) group; blocks until everyone has joined."""
        self.leave()
        if self.vllm:
            if "transport" in init_info:
                raise WeightSyncError(f"a vLLM engine receives over NCCL, not {init_info['transport']!r}")
            self.backend.init_nccl(init_info)
        else:
            import ray

            self._model()
            host = ray.util.get_node_ip_address() if ray.is_initialized() else ""
            self.receiver = GlooReceiver(init_info, host=host)
        self.joined = True

    def check(self, update_info: dict) -> bool:
        """Refuse a round whose tensor list does not fit this worker's model, before any byte is sent; whether this
        worker is in the group (False: restarted since it joined)."""
        meta = meta_of(update_info)
        if not self.vllm:
            check_fits(self._model(), meta)
        return self.joined

    def receive(self, version: int, update_info: dict) -> int:
        """Receive one round the learner broadcasts meanwhile; the version now loaded."""
        if not self.joined:
            raise WeightSyncError("receive_broadcast before join_broadcast: this worker is not in the learner's group")
        if self.vllm:
            return int(self.backend.receive_nccl(version, update_info))

        current = int(getattr(self.backend, "policy_version", -1))
        if int(version) < current:
            raise WeightSyncError(f"refusing weights version {version}: version {current} is already loaded")
        model, meta = self._model(), meta_of(update_info)
        check_fits(model, meta)
        load_into(model, self.receiver.receive(meta))
        model.eval()
        self.backend.policy_version = int(version)
        return int(version)

    def leave(self) -> None:
        """Leave the group (before joining a new one)."""
        if self.joined and self.vllm:
            try:
                self.backend.close_nccl()
            except Exception as exc:  # noqa: BLE001 - a broken old group must not stop joining the new one
                log.warning("leaving the old NCCL group failed: %s", exc)
        if self.receiver is not None:
            self.receiver.close()
        self.receiver, self.joined = None, False


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
