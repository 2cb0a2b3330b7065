"""A learner group: `learner.workers` ranks that train as one data-parallel learner.

Each rank is a `LearnerActor` in its own placement-group bundle (one GPU, or
one CPU slot); together they form one torch.distributed process group (NCCL on
GPUs, gloo on CPU) whose master is rank 0's node. The torch engine averages
gradients over the ranks; DeepSpeed partitions the optimizer state (ZeRO-2)
and the parameters too (ZeRO-3). `LearnerGroup`, an actor of its own, answers
the methods a pipeline calls on one `LearnerActor`: `step` splits the batch
into contiguous shares (the ranks all-reduce the whole batch's counts, so the
loss is normalised as for one learner on all of it), `publish` returns rank
0's weights (ZeRO-3 gathers them first), the `sync_*` methods broadcast them
from rank 0 instead (`weight_sync.BroadcastSync`), `save`/`load` write and read one
checkpoint folder from every rank (on a filesystem all learner nodes share).
`learner_start.start_learner` starts it (and places its ranks).

A rank that dies or raises fails the call with `LearnerGroupError` naming the
rank; the group stops every rank (the others would wait in a collective) and
refuses further work until `recover()` starts fresh ranks from the last
checkpoint it saved or loaded. A rank that does not answer within
`learner.call_timeout_s` (per SFT step for `sft`; `waits.learner_timeout`) is
treated the same way: a stuck collective stops the group, naming the ranks
that did not finish and the key.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from librarian.cluster.learner_actor import LearnerActor
from librarian.cluster.waits import failure_reason, learner_timeout
from librarian.learner.batch import split


class LearnerGroupError(RuntimeError):
    """A learner rank failed, or a batch cannot be split over the ranks; the message names which."""


@dataclass(frozen=True, slots=True)
class RankSpec:
    """One rank's place in the process group; `addr:port` is rank 0's rendezvous."""

    rank: int
    world: int
    addr: str
    port: int
    backend: str  # nccl (GPUs) or gloo (CPU)
    timeout_s: float = 1800.0


def check_split(what: str, n: int, world: int) -> None:
    """Every rank needs at least one sample of each batch; a rank's micro-batches come from its share (fewer
    samples than `grad_accum` make fewer micro-batches, and ZeRO-2/3 ranks even out their counts)."""
    if n < world:
        raise LearnerGroupError(f"{what}: a batch of {n} samples cannot be split over {world} learner ranks "
                                f"(learner.workers): each rank needs at least one sample")


def init_process_group(spec: RankSpec) -> None:
    """Join the group (and set the variables DeepSpeed reads); each rank sees its one GPU as device 0."""
    import torch
    import torch.distributed as dist

    os.environ.update(RANK=str(spec.rank), WORLD_SIZE=str(spec.world), LOCAL_RANK="0", MASTER_ADDR=spec.addr,
                      MASTER_PORT=str(spec.port))
    if spec.backend == "nccl":
        torch.cuda.set_device(0)
    dist.init_process_group(spec.backend, init_method=f"tcp://{spec.addr}:{spec.port}", rank=spec.rank,
                            world_size=spec.world, timeout=timedelta(seconds=spec.timeout_s))


class LearnerRank(LearnerActor):
    """A `LearnerActor` built in two phases: placed first, then `setup` once rank 0's address is known."""

    def __init__(self) -> None:  # noqa: D107 - the learner comes in `setup`
        self.learner: Any = None

    def endpoint(self) -> tuple[str, int]:
        """This node's address and a free port on it: the group's rendezvous when this is rank 0."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), int(s.getsockname()[1])

    def setup(self, spec: RankSpec, backend: str, options: dict, cfg: Any, torch_threads: int = 0) -> int:
        init_process_group(spec)
        self._build(backend, options, cfg, torch_threads)
        return spec.rank


class LearnerGroup:
    """The `LearnerActor` methods over `len(placements)` data-parallel ranks (this actor holds them)."""

    def __init__(self, backend: str, options: dict, cfg: Any, torch_threads: int, placements: list[dict]) -> None:
        if len(placements) < 2:
            raise LearnerGroupError(f"a learner group needs at least 2 ranks, got {len(placements)} placements")
        self.args = (backend, dict(options), cfg, torch_threads)
        self.cfg = cfg
        self.placements = placements
        self.ranks: list[Any] = []
        self.broken = ""
        self.last_checkpoint = ""
        self._start()

    @property
    def world(self) -> int:
        return len(self.placements)

    def _start(self) -> None:
        import ray

        self.ranks = [ray.remote(LearnerRank).options(**p).remote() for p in self.placements]
        limit = learner_timeout(self.cfg, "start-up")
        addr, port = self._all("start-up", [self.ranks[0].endpoint.remote()], limit)[0]
        backend = "nccl" if str(self.cfg.device).startswith("cuda") else "gloo"
        self._all("start-up", [r.setup.remote(RankSpec(i, self.world, addr, port, backend), *self.args)
                               for i, r in enumerate(self.ranks)], limit)
        self.broken = ""

    def _stop(self) -> None:
        import ray

        for r in self.ranks:
            ray.kill(r, no_restart=True)
        self.ranks = []

    def _all(self, what: str, refs: Sequence[Any], timeout_s: float = 0.0) -> list[Any]:
        """The ranks' results in rank order; the first failure, or ranks still running after `timeout_s` (0: no
        limit), stops every rank and names them."""
        import ray

        pending = {ref: i for i, ref in enumerate(refs)}
        out: list[Any] = [None] * len(refs)
        deadline = time.monotonic() + timeout_s if timeout_s else None
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
            if not ready:
                late = sorted(pending.values())
                self._fail(f"learner rank(s) {late} of {self.world} did not finish {what} within {timeout_s:g} s "
                           "(learner.call_timeout_s; a stuck collective or a hung rank)")
            for ref in ready:
                i = pending.pop(ref)
                try:
                    out[i] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - any failure of a rank breaks the group
                    self._fail(f"learner rank {i} of {self.world} failed during {what}: {failure_reason(exc)}")
        return out

    def _fail(self, why: str) -> None:
        """Stop every rank (the others would wait in a collective) and refuse work until `recover()`."""
        self._stop()
        self.broken = why
        raise LearnerGroupError(f"{why}; every rank is stopped: resume from the last checkpoint "
                                "(LearnerGroup.recover, or the run's resume=)") from None

    def _call(self, method: str, *args: Any, timeout_s: float | None = None) -> list[Any]:
        if self.broken:
            raise LearnerGroupError(f"the learner group is stopped ({self.broken}); call recover()")
        limit = learner_timeout(self.cfg, method, args) if timeout_s is None else timeout_s
        return self._all(method, [getattr(r, method).remote(*args) for r in self.ranks], limit)

    def _check_split(self, what: str, n: int) -> None:
        check_split(what, n, self.world)

    def pid(self) -> int:
        """Rank 0's process id."""
        return self._call("pid")[0]

    def pids(self) -> list[int]:
        return self._call("pid")

    def rank_handles(self) -> list[Any]:
        """The rank actors (for tests and operators)."""
        return list(self.ranks)

    def version(self) -> int:
        return self._call("version")[0]

    def step(self, samples: Sequence[Any]) -> dict[str, float]:
        """One update of the whole batch: rank i trains on the i-th contiguous share; the batch's metrics."""
        if self.broken:
            raise LearnerGroupError(f"the learner group is stopped ({self.broken}); call recover()")
        self._check_split("step", len(samples))
        parts = split(list(samples), self.world)
        return self._all("step", [r.step.remote(p) for r, p in zip(self.ranks, parts, strict=True)],
                         learner_timeout(self.cfg, "step"))[0]

    def sft(self, samples: Sequence[Any], epochs: int = 1, batch_size: int = 8, seed: int = 0,
            lr: float = 0.0, eps: float = 0.0) -> list[dict]:
        """SFT: every rank walks the same shuffled batches and trains on its share of each."""
        import ray

        smallest = min(len(samples), batch_size, len(samples) % batch_size or batch_size)
        self._check_split("sft", smallest)
        limit = learner_timeout(self.cfg, "sft", (samples, epochs, batch_size))
        ref = ray.put(list(samples))
        return self._call("sft", ref, epochs, batch_size, seed, lr, eps, timeout_s=limit)[0]

    def freeze_reference(self) -> None:
        self._call("freeze_reference")

    def mean_nll(self, samples: Sequence[Any]) -> float:
        import ray

        return self._call("mean_nll", ray.put(list(samples)))[0]

    def publish(self, transfer: str = "") -> tuple[int, Any]:
        """Rank 0's (version, object ref of the `WeightsPayload`)."""
        return self._call("publish", transfer)[0]

    def release_memory(self) -> None:
        self._call("release_memory")

    def sync_open(self, sizes: list[int], transport: str, buffer_bytes: int = 0, timeout_s: float = 1800.0
                  ) -> list[dict]:
        """Rank 0 hosts the full-weight broadcast (`LearnerActor.sync_open`); the receivers' join payloads."""
        return self._call("sync_open", sizes, transport, buffer_bytes, timeout_s)[0]

    def sync_connect(self) -> None:
        self._call("sync_connect")

    def sync_joined(self, timeout_s: float = 1800.0) -> None:
        self._call("sync_joined", timeout_s)

    def sync_meta(self, dtype: str = "") -> tuple[int, dict]:
        return self._call("sync_meta", dtype)[0]

    def sync_send(self, dtype: str, info: dict) -> tuple[int, int]:
        """Every rank iterates the weights (ZeRO-3 gathers them), rank 0 broadcasts; rank 0's (version, bytes)."""
        return self._call("sync_send", dtype, info)[0]

    def sync_close(self) -> None:
        self._call("sync_close")

    def trainable_norm(self) -> float:
        return self._call("trainable_norm")[0]

    def save(self, folder: str, extra: dict | None = None) -> str:
        out = self._call("save", folder, extra)[0]
        self.last_checkpoint = out
        return out

    def load(self, folder: str) -> dict:
        extra = self._call("load", folder)[0]
        self.last_checkpoint = folder
        return extra

    def recover(self) -> dict:
        """Fresh ranks (the same placements) resumed from the last checkpoint saved or loaded; its `extra`."""
        if not self.last_checkpoint:
            raise LearnerGroupError("the learner group has no checkpoint to recover from (none saved or loaded)")
        self._stop()
        self.broken = ""
        self._start()
        return self.load(self.last_checkpoint)

    def close(self) -> None:
        self._stop()
