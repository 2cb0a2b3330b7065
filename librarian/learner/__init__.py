"""The learner: GRPO advantage estimators, verl's loss math, LoRA, engines (torch, DeepSpeed), weight
publishing, checkpoints with exact resume, and verified-trajectory SFT. See docs/learner.md.

The configs and `LearnerError` load with the package; the torch-backed names below load on first use
(`from librarian.learner import Learner`), so a config or a plan never imports torch."""

from __future__ import annotations

import importlib
from typing import Any

from librarian.learner.config import DeepSpeedConfig, LearnerConfig, LoraConfig, LossConfig
from librarian.learner.errors import LearnerError

# name -> the submodule that defines it (imports torch)
_TORCH_BACKED = {
    **dict.fromkeys(["ESTIMATORS", "get_estimator", "group_normalize", "multi_turn_grpo", "outcome_grpo",
                     "outcome_grpo_per_turn", "register_with_verl", "turn_returns"], "advantages"),
    **dict.fromkeys(["PolicySample", "TensorBatch", "collate", "group_samples", "samples_from_trajectory"], "batch"),
    "Learner": "learner",
    **dict.fromkeys(["WeightsPayload", "load_weights"], "weights"),
}


def __getattr__(name: str) -> Any:
    if name not in _TORCH_BACKED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_TORCH_BACKED[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ESTIMATORS", "DeepSpeedConfig", "Learner", "LearnerConfig", "LearnerError", "LoraConfig", "LossConfig",
    "PolicySample", "TensorBatch", "WeightsPayload", "collate", "get_estimator", "group_normalize",
    "group_samples", "load_weights", "multi_turn_grpo", "outcome_grpo", "outcome_grpo_per_turn",
    "register_with_verl", "samples_from_trajectory", "turn_returns",
]
