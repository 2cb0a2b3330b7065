"""The learner: GRPO advantage estimators, verl's loss math, LoRA, engines (torch, DeepSpeed), weight
publishing, checkpoints with exact resume, and verified-trajectory SFT. See docs/learner.md."""

from librarian.learner.advantages import (
    ESTIMATORS,
    get_estimator,
    group_normalize,
    multi_turn_grpo,
    outcome_grpo,
    outcome_grpo_per_turn,
    register_with_verl,
    turn_returns,
)
from librarian.learner.batch import PolicySample, TensorBatch, collate, group_samples, samples_from_trajectory
from librarian.learner.config import DeepSpeedConfig, LearnerConfig, LoraConfig, LossConfig
from librarian.learner.errors import LearnerError
from librarian.learner.learner import Learner
from librarian.learner.weights import WeightsPayload, load_weights

__all__ = [
    "ESTIMATORS", "DeepSpeedConfig", "Learner", "LearnerConfig", "LearnerError", "LoraConfig", "LossConfig",
    "PolicySample", "TensorBatch", "WeightsPayload", "collate", "get_estimator", "group_normalize",
    "group_samples", "load_weights", "multi_turn_grpo", "outcome_grpo", "outcome_grpo_per_turn",
    "register_with_verl", "samples_from_trajectory", "turn_returns",
]
