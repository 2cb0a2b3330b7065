"""What a learner publishes after an update: its current policy as a `WeightsPayload`, one of three ways.

- full weights (`lora.enabled` false): the trainable state dict;
- LoRA merged (`lora.publish: merged`): the adapters folded into the base weights, as full weights;
- LoRA (the default): the adapter's weights and its shape, which a rollout backend loads as an adapter.
"""

from __future__ import annotations

from typing import Any

from librarian.learner import lora
from librarian.learner.config import LearnerConfig
from librarian.learner.weights import WeightsPayload
from librarian.models.weight_transfer.payloads import this_node


def policy_payload(cfg: LearnerConfig, engine: Any, version: int) -> WeightsPayload:
    """The policy `engine` holds, published as version `version` the way `cfg` says."""
    if not cfg.lora.enabled:
        return WeightsPayload(version, "full", engine.trainable_state(), node=this_node())
    if cfg.lora.publish == "merged":
        return WeightsPayload(version, "full", lora.merged_state(lora.hf_model(engine.module)), node=this_node())
    shape = {k: v for k, v in cfg.lora.shape().items() if k != "enabled"}
    return WeightsPayload(version, "lora", engine.trainable_state(), shape, node=this_node())
