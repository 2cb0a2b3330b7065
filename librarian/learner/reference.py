"""The KL reference policy a learner regularises towards (`loss.kl_coef > 0`).

It is the initial policy until `freeze()` snapshots the current one (SFT's
`fine_tune` calls it at its end, so GRPO regularises towards the fine-tuned
policy, as in paper 002). With LoRA the initial reference is the base model
with the adapters disabled and a frozen one lives in a second peft adapter
(`lora.REFERENCE`, adapter-sized, never trained or published); with full
weights it is a frozen deep copy of the model taken before the engine takes
it (one more copy of every weight on the learner's device, without gradients
or optimizer state). Both are kept only when `kl_coef > 0`; otherwise
`freeze()` does nothing.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import lora
from librarian.learner.config import LearnerConfig
from librarian.learner.errors import LearnerError


def gathered(engine: Any) -> Any:
    """ZeRO-3 partitions parameters: read or write them inside this (a no-op for other engines)."""
    gather = getattr(engine, "_gathered", None)
    return gather() if gather is not None else contextlib.nullcontext()


def peft_model(module: Any) -> Any:
    """The peft model of an engine's module (under DeepSpeed, the module its engine wraps)."""
    return module if lora.is_peft(module) else module.module


class KLReference:
    """A learner's reference policy: made from the model before the engine takes it, then `attach`ed to the
    engine."""

    def __init__(self, model: Any, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.model: Any = None  # full weights: a frozen copy of the model
        if not cfg.lora.enabled and cfg.loss.kl_coef > 0:  # its parameters exist before the engine takes the model
            self.model = copy.deepcopy(model).requires_grad_(False)
        self.frozen = False  # False: the reference is the initial policy
        self.engine: Any = None

    def attach(self, engine: Any) -> None:
        """Follow `engine` (the policy's); a full-weight copy moves to its device and precision."""
        self.engine = engine
        if self.model is not None:
            dtype = torch.bfloat16 if self.cfg.precision == "bf16" else torch.float32
            self.model.to(engine.device, dtype=dtype)

    def freeze(self) -> None:
        """Make the current policy the reference from now on (a no-op when `kl_coef` is 0). LoRA: the trained
        adapter's weights are copied into the frozen `reference` adapter; full weights: the frozen copy gets the
        current weights. The optimizer never sees the reference's parameters."""
        if self.cfg.loss.kl_coef <= 0:
            return
        if self.cfg.lora.enabled:
            with gathered(self.engine):
                lora.copy_adapter(peft_model(self.engine.module), lora.TRAINED, lora.REFERENCE)
        else:
            self.model.load_state_dict(self.engine.trainable_state())
        self.frozen = True

    def state(self) -> dict[str, torch.Tensor]:
        """The frozen reference's tensors (detached CPU copies): adapter weights, or the full state dict."""
        if self.cfg.lora.enabled:
            with gathered(self.engine):
                return lora.adapter_state(peft_model(self.engine.module), lora.REFERENCE)
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Make `state` (`state()`'s) the frozen reference's weights."""
        if self.cfg.lora.enabled:
            with gathered(self.engine):
                lora.load_adapter_state(peft_model(self.engine.module), state, lora.REFERENCE)
        else:
            self.model.load_state_dict(state)

    @contextmanager
    def module(self, base: bool = False) -> Iterator[Any]:
        """The reference policy's module to call inside; `base`: the initial policy (LoRA only)."""
        policy = self.engine.module
        if self.cfg.lora.enabled:
            if self.frozen and not base:
                with lora.active(peft_model(policy), lora.REFERENCE):
                    yield policy
            else:
                with policy.disable_adapter():
                    yield policy
            return
        if base and self.frozen:
            raise LearnerError("with full weights the initial policy is gone once the reference is frozen")
        if self.model is None:
            raise LearnerError("no reference model: a full-weight learner keeps one only when "
                               "learner.loss.kl_coef > 0")  # not reached from `step`
        self.model.train(policy.training)
        yield self.model
