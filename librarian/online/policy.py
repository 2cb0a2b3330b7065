"""A role's policy as config: a backend by name with its options, and sampling (the curator's and readers')."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.config import ConfigError
from librarian.models import SamplingParams, make_backend
from librarian.roles import LoopConfig


@dataclass
class PolicyConfig:
    """A policy: a backend by name with its options, and sampling. backend 'reader' reuses the reader's."""

    backend: str = "scripted"  # scripted | hf | openai | vllm | reader
    options: dict = field(default_factory=dict)  # e.g. {policy: kbgym_reader} or {model: smollm2}
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0


def make_policy(cfg: PolicyConfig, scripted: str, reader: Any = None) -> Any:
    """The backend a policy config names (`reader` reuses an already built one; `scripted` is the
    scripted policy used when the config names none)."""
    if cfg.backend == "reader":
        if reader is None:
            raise ConfigError("backend 'reader' reuses the reader's backend, which is not built yet")
        return reader
    options = dict(cfg.options)
    if cfg.backend == "scripted":
        options.setdefault("policy", scripted)
    return make_backend(cfg.backend, **options)


def loop_config(cfg: PolicyConfig) -> Any:
    return LoopConfig(params=SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                            top_p=cfg.top_p, seed=cfg.seed))
