"""Full-weight sync over NCCL, the trainer's half; vLLM's own `weight_transfer` engine is the other half.

vLLM (0.32) ships an NCCL weight-transfer engine inside each of its workers
(`vllm.distributed.weight_transfer`, switched on by
`weight_transfer_config={"backend": "nccl"}`): a worker joins one NCCL group
with the trainer, receives the weights in packed buffers and loads each
buffer as it arrives (layerwise reload), so no worker ever holds a second
copy of the model. Its trainer half imports vLLM, which the trainer
environment cannot hold (verl pins transformers < 5.11, vLLM needs newer),
so this module speaks the same wire with torch alone, in the rendezvous mode
vLLM offers for trainers without vLLM (a pre-shared `ncclUniqueId`):

- one group for every engine: the trainer is rank 0, engine e's
  tensor-parallel shard s is rank `1 + sum(sizes[:e]) + s` (`engine_ranks`);
  every shard receives every tensor (vLLM's loader keeps its shard);
- `NcclWeightSender()` mints the unique id; `init_info(e)` is engine e's
  `init_weight_transfer_engine` payload; everyone then joins at once
  (`connect()` here while each engine runs its init), and the trainer
  answers the one-element all-reduce vLLM's communicator starts with;
- `send(named_tensors)` packs tensors into byte buffers of
  `buffer_bytes`, cut exactly where vLLM's consumer cuts them
  (`pack_plan`), and broadcasts them in order, while every engine runs
  `update_weights(update_info(meta))` between `start_weight_update` and
  `finish_weight_update` (`VLLMBackend.receive_nccl`).

The packing (`packed_buffers`, `unpacked`) is shared with the CPU twin of
this wire, `weight_transfer.gloo.GlooWeightSender` (gloo instead of NCCL, for
rollout workers with an `hf` model), so the orchestration that drives
either (`cluster.weight_sync.BroadcastSync`) is tested on CPU.

NCCL versions: NCCL's own init refuses a group whose ranks load different
NCCL builds ("Mismatched NCCL version detected", comparing major, minor and
patch), and the trainer's torch and vLLM's torch may bundle different ones.
The sender puts its version (`nccl_version()`) into each engine's init
payload; the engine compares it with its own (`accept_init_info`) before it
joins and refuses a mismatch naming both (docs/vllm.md, "NCCL versions").

The NCCL transfer needs GPUs; `pack_plan`, the rank layout and the payloads
are checked against vLLM's own code on CPU (tests/models), the packing and a
single-rank NCCL round trip on a GPU by `scripts/gpu_check.py`, the transfer
to a running engine by `scripts/gpu_check.sh`.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from librarian.models.base import BackendError

UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId)
BUFFER_BYTES = 256 << 20  # packed broadcast buffer (vLLM's default is 1 GiB; the trainer's value is what both use)
TRAINER_NCCL = "librarian_trainer_nccl"  # the init payload's key for the trainer's NCCL version (not vLLM's)


def nccl_version() -> str:
    """The NCCL library this process's torch loads, 'major.minor.patch'; '' when torch has none (a CPU build)."""
    import torch

    try:
        parts = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return ""
    if isinstance(parts, int):  # torch before 2.1: NCCL_VERSION_CODE (2.9 on: major * 10000 + minor * 100 + patch)
        parts = (parts // 10000, parts // 100 % 100, parts % 100) if parts >= 10000 else \
            (parts // 1000, parts // 100 % 10, parts % 100)
    return ".".join(str(int(p)) for p in tuple(parts)[:3])


def check_nccl_versions(trainer: str, engine: str) -> None:
    """Refuse one NCCL group over two NCCL builds, naming both: NCCL's init compares every rank's full version
    code (major, minor, patch) and fails the group on any difference. An unknown version ('') is not refused."""
    if trainer and engine and trainer.split(".")[:3] != engine.split(".")[:3]:
        raise BackendError(f"NCCL weight sync: the trainer loads NCCL {trainer}, this vLLM engine NCCL {engine}; "
                           "NCCL refuses one group over two versions ('Mismatched NCCL version detected'). Install "
                           "the same nvidia-nccl wheel in both environments (docs/vllm.md, 'NCCL versions')")


def accept_init_info(init_info: dict[str, Any], own: str) -> dict[str, Any]:
    """An engine's side of `init_payload`: the payload for vLLM (the trainer's NCCL version taken out) once that
    version matches `own`, this engine's (`check_nccl_versions`)."""
    info = dict(init_info)
    check_nccl_versions(str(info.pop(TRAINER_NCCL, "") or ""), own)
    return info


def engine_ranks(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Each engine's first rank in the group (its `rank_offset`) and the group's size, for engines whose
    vLLM worlds (tensor x pipeline parallel) have `sizes` ranks; the trainer is rank 0."""
    if not sizes or any(int(s) < 1 for s in sizes):
        raise BackendError(f"NCCL weight sync needs at least one engine of >= 1 ranks, got sizes {list(sizes)}")
    offsets, at = [], 1
    for size in sizes:
        offsets.append(at)
        at += int(size)
    return offsets, at


def weights_meta(named: Iterable[tuple[str, Any]]) -> list[tuple[str, str, list[int]]]:
    """(name, dtype name, shape) of each tensor, in send order."""
    return [(name, str(t.dtype).removeprefix("torch."), list(t.shape)) for name, t in named]


def update_info(meta: Sequence[tuple[str, str, Sequence[int]]]) -> dict[str, Any]:
    """The `update_weights` payload of one round (vLLM's `NCCLWeightTransferUpdateInfo` fields)."""
    return {"names": [m[0] for m in meta], "dtype_names": [m[1] for m in meta],
            "shapes": [list(map(int, m[2])) for m in meta]}


def tensor_bytes(dtype: str, shape: Sequence[int]) -> int:
    import torch

    return math.prod(int(s) for s in shape) * getattr(torch, dtype).itemsize


def pack_plan(meta: Sequence[tuple[str, str, Sequence[int]]], buffer_bytes: int = BUFFER_BYTES) -> list[list[int]]:
    """Indices of the tensors in each broadcast buffer: tensors are added until the buffer holds more than
    `buffer_bytes` (the tensor that crosses the line ends the buffer), as vLLM's packed consumer reads them."""
    plan: list[list[int]] = [[]]
    size = 0
    for i, (_, dtype, shape) in enumerate(meta):
        plan[-1].append(i)
        size += tensor_bytes(dtype, shape)
        if size > buffer_bytes:
            plan.append([])
            size = 0
    return [p for p in plan if p]


def meta_of(info: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    """The (name, dtype, shape) rows of an `update_info` payload (its inverse)."""
    names, dtypes, shapes = info.get("names"), info.get("dtype_names"), info.get("shapes")
    if not isinstance(names, list) or not isinstance(dtypes, list) or not isinstance(shapes, list) or \
            not len(names) == len(dtypes) == len(shapes):
        raise BackendError(f"update_info needs equally long lists names, dtype_names, shapes; got {sorted(info)}")
    return [(str(n), str(d), [int(x) for x in s]) for n, d, s in zip(names, dtypes, shapes, strict=True)]


def packed_buffers(named: Iterable[tuple[str, Any]], meta: Sequence[tuple[str, str, Sequence[int]]],
                   buffer_bytes: int, device: Any) -> Iterator[Any]:
    """The byte buffers (uint8 on `device`) of one round, cut by `pack_plan`; each tensor `named` yields is
    checked against its `meta` row first, and a missing or extra tensor is refused, naming it."""
    import torch

    stream = iter(named)
    for indices in pack_plan(meta, buffer_bytes):
        parts = []
        for i in indices:
            name, tensor = next(stream, (None, None))
            want = meta[i]
            if tensor is None or name != want[0] or list(tensor.shape) != list(want[2]) or \
                    str(tensor.dtype).removeprefix("torch.") != want[1]:
                got = "nothing" if tensor is None else \
                    f"{name!r} {str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"
                raise BackendError(f"weight {i}: sending {got} but the receivers expect {want[0]!r} "
                                   f"{want[1]} {list(want[2])}")
            parts.append(tensor.detach().to(device).contiguous().view(-1).view(torch.uint8))
        yield torch.cat(parts)
        del parts
    extra = next(stream, None)
    if extra is not None:
        raise BackendError(f"more weights to send than the {len(meta)} the receivers expect (next: {extra[0]!r})")


def unpacked(buffer: Any, meta: Sequence[tuple[str, str, Sequence[int]]], indices: Sequence[int]
             ) -> Iterator[tuple[str, Any]]:
    """The tensors of one received buffer (views into it), in order: `packed_buffers` inverted."""
    import torch

    at = 0
    for i in indices:
        name, dtype, shape = meta[i]
        size, kind = tensor_bytes(dtype, shape), getattr(torch, dtype)
        chunk = buffer[at: at + size]
        chunk = chunk.clone() if at % kind.itemsize else chunk  # a dtype view needs an aligned offset
        yield name, chunk.view(kind).view([int(s) for s in shape])
        at += size
    if at != buffer.numel():
        raise BackendError(f"a received buffer has {buffer.numel()} bytes, its tensors {at}")


def init_payload(unique_id: bytes, rank_offset: int, world_size: int, buffer_bytes: int = BUFFER_BYTES,
                 trainer_nccl: str = "") -> dict[str, Any]:
    """An engine's `init_weight_transfer_engine` payload (vLLM's `NCCLWeightTransferInitInfo` fields): the
    unique-id rendezvous, its first rank, the group's size and the packing both sides use; with `trainer_nccl`,
    also the trainer's NCCL version, which the engine checks and removes (`accept_init_info`)."""
    if len(unique_id) != UNIQUE_ID_BYTES or not 1 <= rank_offset < world_size:
        raise BackendError(f"NCCL init: a {UNIQUE_ID_BYTES}-byte unique id and 1 <= rank_offset < world_size "
                           f"are needed, got {len(unique_id)} bytes, rank_offset {rank_offset}, world {world_size}")
    out = {"rank_offset": int(rank_offset), "world_size": int(world_size),
           "nccl_unique_id_b64": base64.b64encode(unique_id).decode("ascii"), "packed": True,
           "packed_buffer_size_bytes": int(buffer_bytes), "packed_num_buffers": 2}
    return {**out, TRAINER_NCCL: trainer_nccl} if trainer_nccl else out


class NcclWeightSender:
    """The trainer's end of the group (rank 0 on its current CUDA device); see the module docstring."""

    transport = "nccl"

    def __init__(self, sizes: Sequence[int], buffer_bytes: int = BUFFER_BYTES) -> None:
        import torch

        if not torch.cuda.is_available():
            raise BackendError("NCCL weight sync needs a CUDA device in the learner process")
        self.offsets, self.world_size = engine_ranks(sizes)
        self.buffer_bytes = int(buffer_bytes)
        self.unique_id = bytes(torch.cuda.nccl.unique_id())
        if len(self.unique_id) != UNIQUE_ID_BYTES:
            raise BackendError(f"torch's NCCL unique id has {len(self.unique_id)} bytes, expected {UNIQUE_ID_BYTES}")
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.nccl = nccl_version()
        self.comm: Any = None

    def init_info(self, engine: int) -> dict[str, Any]:
        """Engine `engine`'s `init_weight_transfer_engine` payload, with this trainer's NCCL version to check."""
        return init_payload(self.unique_id, self.offsets[engine], self.world_size, self.buffer_bytes, self.nccl)

    def connect(self) -> None:
        """Join the group as rank 0 (blocks until every engine shard has joined), then vLLM's warm-up."""
        import torch
        import torch.cuda.nccl as nccl

        with torch.cuda.device(self.device):
            self.comm = nccl.init_rank(self.world_size, self.unique_id, 0)
            warm = torch.zeros(1, device=self.device)
            nccl.all_reduce([warm], comms=[self.comm])
            torch.cuda.synchronize(self.device)

    def send(self, named: Iterable[tuple[str, Any]], meta: Sequence[tuple[str, str, Sequence[int]]]) -> int:
        """Broadcast the tensors `named` yields (they must match `meta`, which the engines were given) in packed
        buffers; returns the bytes sent. Only one buffer is alive at a time."""
        import torch
        import torch.cuda.nccl as nccl

        if self.comm is None:
            raise BackendError("NcclWeightSender.send before connect()")
        sent = 0
        with torch.cuda.device(self.device):
            for buffer in packed_buffers(named, meta, self.buffer_bytes, self.device):
                nccl.broadcast([buffer], root=0, comms=[self.comm])
                sent += buffer.numel()
                torch.cuda.current_stream(self.device).synchronize()
                del buffer
        return sent

    def close(self) -> None:
        self.comm = None  # torch frees the communicator with its handle
