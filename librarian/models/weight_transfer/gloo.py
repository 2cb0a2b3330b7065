"""Full-weight broadcast over gloo: the CPU twin of `weight_transfer.nccl`'s wire, with both ends in this package.

The learner (rank 0) and every receiver join one group; each round the
learner broadcasts the weights in the byte buffers `weight_transfer.nccl.pack_plan`
cuts, and every receiver unpacks them (`weight_transfer.nccl.unpacked`) by the round's
`update_info`. Only the transport differs from the NCCL wire to vLLM
engines, so one orchestration (`cluster.weight_sync.BroadcastSync`) drives
both, and its CPU tests exercise the same calls:

- `GlooWeightSender(sizes, host=...)` hosts the rendezvous (a `TCPStore` on a
  free port) and offers the same surface as `weight_transfer.nccl.NcclWeightSender`:
  `init_info(e)`, `connect()`, `send(named, meta)`, `close()`;
- `GlooReceiver(init_info)` joins as receiver `init_info["rank_offset"]`
  (this blocks until everyone has joined: call it while the sender
  connects); `receive(meta)` yields the round's tensors;
- `check_fits(model, meta)` refuses a round that does not match a model's
  parameters (before any collective starts), `load_into(model, named)`
  copies received tensors into it.

The groups are built without `torch.distributed`'s default process group, so
a learner rank that is already in its data-parallel group can host one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from typing import Any

from librarian.models.base import BackendError
from librarian.models.weight_transfer.nccl import (
    BUFFER_BYTES,
    NcclWeightSender,
    engine_ranks,
    pack_plan,
    packed_buffers,
    tensor_bytes,
    unpacked,
)

TRANSPORTS = ("nccl", "gloo")
Meta = Sequence[tuple[str, str, Sequence[int]]]


def _gloo_group(store: Any, rank: int, world: int, host: str, timeout_s: float) -> Any:
    """A gloo process group over `store` (no default process group needed); blocks until all `world` have joined."""
    import torch.distributed as dist

    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timedelta(seconds=timeout_s)
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    return dist.ProcessGroupGloo(store, rank, world, opts)


class GlooWeightSender:
    """The learner's end of a gloo broadcast group (rank 0); the surface of `NcclWeightSender`."""

    transport = "gloo"

    def __init__(self, sizes: Sequence[int], buffer_bytes: int = BUFFER_BYTES, host: str = "127.0.0.1",
                 timeout_s: float = 1800.0) -> None:
        import torch.distributed as dist

        self.offsets, self.world_size = engine_ranks(sizes)
        self.buffer_bytes = int(buffer_bytes)
        self.host = host
        self.timeout_s = float(timeout_s)
        self.store = dist.TCPStore(host, 0, None, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        self.port = int(self.store.port)
        self.group: Any = None

    def init_info(self, engine: int) -> dict[str, Any]:
        """Receiver `engine`'s join payload: the rendezvous, its rank, the group's size and the buffer size."""
        return {"transport": "gloo", "host": self.host, "port": self.port, "rank_offset": self.offsets[engine],
                "world_size": self.world_size, "packed_buffer_size_bytes": self.buffer_bytes,
                "timeout_s": self.timeout_s}

    def connect(self) -> None:
        """Join as rank 0 (blocks until every receiver has joined), then one all-reduce as everyone's warm-up."""
        import torch

        self.group = _gloo_group(self.store, 0, self.world_size, self.host, self.timeout_s)
        self.group.allreduce([torch.zeros(1)]).wait()

    def send(self, named: Iterable[tuple[str, Any]], meta: Meta) -> int:
        """Broadcast the tensors `named` yields (checked against `meta`) in packed buffers; the bytes sent."""
        if self.group is None:
            raise BackendError("GlooWeightSender.send before connect()")
        sent = 0
        for buffer in packed_buffers(named, meta, self.buffer_bytes, "cpu"):
            self.group.broadcast(buffer, 0).wait()
            sent += buffer.numel()
        return sent

    def close(self) -> None:
        self.group = None
        self.store = None


def make_sender(transport: str, sizes: Sequence[int], buffer_bytes: int = BUFFER_BYTES, host: str = "127.0.0.1",
                timeout_s: float = 1800.0) -> Any:
    """The learner's sender for `transport`: 'nccl' (vLLM engines, CUDA) or 'gloo' (hf models, any device)."""
    if transport == "gloo":
        return GlooWeightSender(sizes, buffer_bytes, host, timeout_s)
    if transport == "nccl":
        return NcclWeightSender(sizes, buffer_bytes)
    raise BackendError(f"weight broadcast transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")


class GlooReceiver:
    """A receiver's end of a `GlooWeightSender` group; joining blocks until the whole group has joined."""

    def __init__(self, init_info: dict[str, Any], host: str = "") -> None:
        import torch
        import torch.distributed as dist

        missing = [k for k in ("host", "port", "rank_offset", "world_size", "packed_buffer_size_bytes")
                   if k not in init_info]
        if init_info.get("transport") != "gloo" or missing:
            raise BackendError(f"a gloo receiver needs a gloo init_info (GlooWeightSender.init_info); got transport "
                               f"{init_info.get('transport')!r}, missing {missing}")
        timeout_s = float(init_info.get("timeout_s", 1800.0))
        self.rank = int(init_info["rank_offset"])
        self.world_size = int(init_info["world_size"])
        self.buffer_bytes = int(init_info["packed_buffer_size_bytes"])
        store = dist.TCPStore(str(init_info["host"]), int(init_info["port"]), None, False,
                              timedelta(seconds=timeout_s))
        self.group = _gloo_group(store, self.rank, self.world_size, host or str(init_info["host"]), timeout_s)
        self.group.allreduce([torch.zeros(1)]).wait()

    def receive(self, meta: Meta) -> Iterator[tuple[str, Any]]:
        """The round's tensors in `meta` order, as the sender broadcasts them (views into the received buffers)."""
        import torch

        if self.group is None:
            raise BackendError("this receiver has left its group")
        for indices in pack_plan(meta, self.buffer_bytes):
            buffer = torch.empty(sum(tensor_bytes(meta[i][1], meta[i][2]) for i in indices), dtype=torch.uint8)
            self.group.broadcast(buffer, 0).wait()
            yield from unpacked(buffer, meta, indices)

    def close(self) -> None:
        self.group = None


def check_fits(model: Any, meta: Meta) -> None:
    """Refuse a round whose tensor list is not `model`'s parameters (names, shapes, count), naming the first
    difference; dtypes may differ (the copy casts)."""
    params = dict(model.named_parameters())
    names = [m[0] for m in meta]
    for name, _, shape in meta:
        if name not in params:
            raise BackendError(f"weight broadcast: the learner sends {name!r}, which this model does not have "
                               f"(it has e.g. {sorted(params)[:3]})")
        if list(params[name].shape) != [int(s) for s in shape]:
            raise BackendError(f"weight broadcast: {name!r} comes as {list(shape)} but this model's is "
                               f"{list(params[name].shape)}")
    left = sorted(set(params) - set(names))
    if left or len(names) != len(set(names)):
        raise BackendError(f"weight broadcast: the learner's {len(names)} tensors do not cover this model's "
                           f"{len(params)} parameters (not sent: {left[:3]})")


def load_into(model: Any, named: Iterable[tuple[str, Any]]) -> int:
    """Copy received tensors into `model`'s parameters of the same names (cast to their dtype); how many."""
    import torch

    params = dict(model.named_parameters())
    count = 0
    with torch.no_grad():
        for name, tensor in named:
            params[name].copy_(tensor)
            count += 1
    return count
