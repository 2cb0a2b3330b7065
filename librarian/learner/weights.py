"""Weight sync: what the learner publishes, how a rollout worker loads it into an `hf` backend, and the full
weights as a stream for an NCCL broadcast (`librarian.models.weight_transfer.nccl`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from librarian.learner import lora
from librarian.learner.config import LoraConfig
from librarian.learner.errors import LearnerError


@dataclass(frozen=True)
class WeightsPayload:
    """A published policy: `kind` 'lora' (adapter weights + its LoRA config) or 'full' (a full state dict).

    Plain tensors and dicts only, so it pickles (and travels through Ray's object store). `node` names the
    machine that published it (`weight_transfer.payloads.this_node`): CUDA IPC handles open only there. `ipc`: full weights as
    packed CUDA IPC handles of the learner's own GPU tensors (`weight_transfer.payloads.cuda_ipc_handles`), `state` then empty.
    """

    version: int
    kind: str
    state: dict[str, Any]
    lora: dict[str, Any] = field(default_factory=dict)
    node: str = ""
    ipc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("lora", "full"):
            raise LearnerError(f"WeightsPayload.kind must be 'lora' or 'full', got {self.kind!r}")

    @property
    def num_bytes(self) -> int:
        return sum(int(t.numel() * t.element_size()) for t in self.state.values())


def load_weights(backend: Any, payload: WeightsPayload) -> int:
    """Load `payload` into `backend.model` (an `HFBackend` or anything with a `.model`); returns the version.

    A LoRA payload wraps the model with the same adapters the first time.
    An older version than the one loaded is refused, so a worker never goes
    back in time.
    """
    current = getattr(backend, "policy_version", -1)
    if payload.version < current:
        raise LearnerError(f"refusing weights version {payload.version}: version {current} is already loaded")
    model = backend.model
    if payload.kind == "lora":
        if not lora.is_peft(model):
            model = lora.wrap(model, LoraConfig(**payload.lora))
            backend.model = model
        lora.load_adapter_state(model, payload.state)
    else:
        if lora.is_peft(model):
            raise LearnerError("full weights cannot be loaded into a model that carries LoRA adapters")
        missing, unexpected = model.load_state_dict(payload.state, strict=False)
        if unexpected or missing:
            raise LearnerError(f"full weights do not fit the model: missing {list(missing)[:5]}, "
                               f"unexpected {list(unexpected)[:5]}")
    model.eval()
    backend.policy_version = payload.version
    return payload.version


def full_weights(learner: Any, dtype: Any = None) -> Iterator[tuple[str, Any]]:
    """The policy's full weights (transformers names) one tensor at a time, on the learner's device, cast to
    `dtype` (e.g. the engines' bfloat16). Every rank of a learner group iterates together: under ZeRO-3 each
    tensor is gathered from the ranks (a collective) and handed out as a copy."""
    if learner.cfg.lora.enabled:
        raise LearnerError("a LoRA learner publishes adapters (folders), not full weights")

    gather = getattr(learner.engine, "gathered_params", None)
    for name, param in lora.hf_model(learner.engine.module).named_parameters():
        with gather([param]) if gather else _nothing():
            tensor = param.detach()
            tensor = tensor.to(dtype) if dtype is not None and tensor.dtype != dtype else tensor
            yield name, (tensor.clone() if getattr(learner.engine, "partitioned", False) else tensor)


def device_state(learner: Any) -> dict[str, Any]:
    """The full weights (transformers names) as the learner's own tensors on its device: no copy, no CPU detour.
    What CUDA IPC hands to a vLLM engine on the same GPU (the colocated layout); the engine casts as it loads.
    Other paths publish `engine.trainable_state()`'s CPU copies."""
    return dict(full_weights(learner))


def full_weights_meta(learner: Any, dtype: Any = None) -> list[tuple[str, str, list[int]]]:
    """(name, dtype, shape) of `full_weights` without gathering anything (what the engines allocate)."""
    out = []
    for name, param in lora.hf_model(learner.engine.module).named_parameters():
        shape = list(getattr(param, "ds_shape", param.shape))  # ZeRO-3 keeps the full shape in ds_shape
        out.append((name, str(dtype or param.dtype).removeprefix("torch."), [int(s) for s in shape]))
    return out


def _nothing() -> Any:
    return contextlib.nullcontext()
