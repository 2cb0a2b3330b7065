"""LoRA through peft: wrap a causal LM, read and write its adapter weights."""

from __future__ import annotations

from typing import Any

from librarian.learner.config import LoraConfig
from librarian.learner.errors import LearnerError


def peft_config(cfg: LoraConfig) -> Any:
    """peft's `LoraConfig` for `cfg`."""
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                          target_modules=list(cfg.target_modules), task_type="CAUSAL_LM", bias="none")


def is_peft(model: Any) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def wrap(model: Any, cfg: LoraConfig) -> Any:
    """`model` with trainable LoRA adapters (base weights frozen); adapters start as the identity (B = 0)."""
    from peft import get_peft_model

    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    missing = [t for t in cfg.target_modules if t not in names]
    if missing:
        raise LearnerError(f"learner.lora.target_modules {missing} are not modules of {type(model).__name__}; "
                           f"some that are: {sorted(n for n in names if n.endswith('proj'))[:12]}")
    return get_peft_model(model, peft_config(cfg))


def adapter_state(model: Any) -> dict[str, Any]:
    """The adapter weights only (detached CPU copies)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_state(model: Any, state: dict[str, Any]) -> None:
    """Write adapter weights into a peft model; every adapter key must match."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise LearnerError(f"adapter weights do not fit the model: unexpected keys {unexpected[:5]}")
