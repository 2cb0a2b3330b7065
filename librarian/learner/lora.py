"""LoRA through peft: wrap a causal LM, read and write its adapter weights, keep a frozen reference adapter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
    """`model` with trainable LoRA adapters (base weights frozen); adapters start as the identity (B = 0).

    A model that already is a peft model is returned as it is (the learner wraps before its engine does, to add
    the reference adapter before DeepSpeed registers the parameters)."""
    from peft import get_peft_model

    if is_peft(model):
        return model
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    missing = [t for t in cfg.target_modules if t not in names]
    if missing:
        raise LearnerError(f"learner.lora.target_modules {missing} are not modules of {type(model).__name__}; "
                           f"some that are: {sorted(n for n in names if n.endswith('proj'))[:12]}")
    return get_peft_model(model, peft_config(cfg))


TRAINED = "default"  # peft's name for the adapter `wrap` adds: the one the optimizer updates and workers load
REFERENCE = "reference"  # a frozen copy of it: the KL reference policy after `Learner.freeze_reference`


def adapter_state(model: Any, adapter: str = TRAINED) -> dict[str, Any]:
    """The weights of one adapter only (detached CPU copies; keys without the adapter name)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model, adapter_name=adapter).items()}


def load_adapter_state(model: Any, state: dict[str, Any], adapter: str = TRAINED) -> None:
    """Write adapter weights into one adapter of a peft model; every adapter key must match."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state, adapter_name=adapter)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise LearnerError(f"adapter weights do not fit the model: unexpected keys {unexpected[:5]}")


def hf_model(model: Any) -> Any:
    """The transformers model inside DeepSpeed's engine and peft's wrapper (peft forwards attributes)."""
    while type(model).__name__ == "DeepSpeedEngine":
        model = model.module
    return model


def has_adapter(model: Any, name: str) -> bool:
    return name in getattr(model, "peft_config", {})


def add_frozen_adapter(model: Any, cfg: LoraConfig, name: str = REFERENCE) -> None:
    """A second adapter `name` shaped like the trained one, never trainable and never active by default.

    Add it before an engine takes the model (DeepSpeed records the module's parameters when it starts).
    Its random init draws from a forked RNG, so the caller's random streams (and exact resume) are untouched."""
    import torch

    device = next(model.parameters()).device
    devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        model.add_adapter(name, peft_config(cfg))
    model.set_requires_grad(name, requires_grad=False)
    if model.active_adapter != TRAINED:
        raise LearnerError(f"adding the {name!r} adapter changed the active adapter to {model.active_adapter!r}")


def copy_adapter(model: Any, source: str, target: str) -> None:
    """`target`'s weights := `source`'s (device to device, no CPU round trip)."""
    import torch
    from peft import get_peft_model_state_dict

    with torch.no_grad():
        state = {k: v.detach() for k, v in get_peft_model_state_dict(model, adapter_name=source).items()}
        load_adapter_state(model, state, target)


@contextmanager
def active(model: Any, name: str) -> Iterator[Any]:
    """Forward passes inside use adapter `name` (frozen); afterwards the trained adapter is the active, trainable
    one again and `name` stays frozen, even if the body raised."""
    model.set_adapter(name, inference_mode=True)
    try:
        yield model
    finally:
        model.set_adapter(TRAINED)
        model.set_requires_grad(name, requires_grad=False)


def merged_state(model: Any, adapter: str = TRAINED) -> dict[str, Any]:
    """The full weights (transformers names, detached CPU copies) of a peft model with `adapter` folded in:
    W + alpha/rank * B A for every adapted linear, the base weights elsewhere. The model is not changed (no
    merge and unmerge, whose round trip would drift the base weights a little every step)."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    state: dict[str, Any] = {}
    with torch.no_grad():
        for name, tensor in base.state_dict().items():  # state_dict: tied weights under each of their names
            if ".lora_" not in name:
                state[name.replace(".base_layer.", ".")] = tensor.detach().cpu().clone()
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                key = f"{name}.weight"
                if key not in state:
                    raise LearnerError(f"merging LoRA: {key} is not a weight of the base model")
                delta = module.get_delta_weight(adapter).detach().cpu()
                state[key] = state[key] + delta.to(state[key].dtype)
    return state
