"""Weight sync: what the learner publishes and how a rollout worker loads it into an `hf` backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.learner.config import LoraConfig
from librarian.learner.errors import LearnerError


@dataclass(frozen=True)
class WeightsPayload:
    """A published policy: `kind` 'lora' (adapter weights + its LoRA config) or 'full' (a full state dict).

    Plain tensors and dicts only, so it pickles (and travels through Ray's object store).
    """

    version: int
    kind: str
    state: dict[str, Any]
    lora: dict[str, Any] = field(default_factory=dict)

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
    from librarian.learner import lora

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
