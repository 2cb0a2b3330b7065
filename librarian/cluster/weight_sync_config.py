"""What both sides of weight sync share: how a run's weights travel, the broadcast round's note, the error.

`broadcast_transport` picks the way once per run (the object store, or a
broadcast over NCCL or gloo) from the rollout backend and its
`weight_transfer` option; `backend_options` drops that option for backends
that do not take it. `BroadcastNote` is what the object store holds under
broadcast sync (the driver writes it, a worker that missed the round reads
it); `WeightSyncError` names who failed. The driver side is `weight_sync`,
the worker side `weight_sync_worker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEY = "rollout.sync_timeout_s"
NO_LIMIT_S = 7 * 24 * 3600.0  # what a process group's timeout becomes when the key is 0 (no limit)
MODES = {"vllm": "nccl", "hf": "broadcast"}  # the weight_transfer value that broadcasts, per rollout backend


class WeightSyncError(RuntimeError):
    """A worker could not load published weights, or the broadcast group failed; the message names who."""


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
