"""The plain torch engine (CPU or one GPU): a model, its trainable parameters, AdamW, gradient clipping.

Every engine offers the same small surface, so the `Learner` does not care
which one it drives: `module` (call it for logits), `backward(loss)`,
`step() -> grad_norm`, `trainable_state()` / `load_trainable_state()` and
`optimizer_state()` / `load_optimizer_state()`.
"""

from __future__ import annotations

from typing import Any

import torch

from librarian.learner import lora
from librarian.learner.config import LearnerConfig


def prepare_model(model: Any, cfg: LearnerConfig) -> Any:
    """`model` on `cfg.device`, wrapped with LoRA when enabled, in train mode."""
    model = model.to(cfg.device)
    if cfg.lora.enabled:
        model = lora.wrap(model, cfg.lora)
    model.train()
    return model


class TorchEngine:
    """AdamW over the trainable parameters; gradients accumulate until `step()`."""

    def __init__(self, model: Any, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.module = prepare_model(model, cfg)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=tuple(cfg.betas),
                                           weight_decay=cfg.weight_decay)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        if self.cfg.lora.enabled:
            return lora.adapter_state(self.module)
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.cfg.lora.enabled:
            lora.load_adapter_state(self.module, state)
        else:
            self.module.load_state_dict(state)

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def set_lr(self, lr: float) -> None:
        """The learning rate of every parameter group from now on."""
        for group in self.optimizer.param_groups:
            group["lr"] = float(lr)

    def reset_optimizer(self) -> None:
        """Forget the optimizer's moments (a new training stage starts from fresh AdamW state)."""
        self.optimizer.state.clear()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def save(self, folder: Any) -> None:
        """Engine-specific extra files (none for torch)."""

    def load(self, folder: Any) -> None:
        """Engine-specific extra files (none for torch)."""
