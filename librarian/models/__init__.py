"""Policy backends behind one interface: `hf`, `openai`, `scripted` and `vllm` (an engine in `.venv-vllm`).

Backends are chosen by name with `make_backend`; each is imported only when
made, so `import librarian.models` never loads torch or transformers. The
scripted policies (`scripted/`) are teachers and test policies; the wires
that bring a learner's published weights to a backend are in
`weight_transfer/`.
"""

from __future__ import annotations

import importlib
from typing import Any

from librarian.models.base import (
    BackendError,
    FinishReason,
    Message,
    PolicyBackend,
    Sample,
    SamplingParams,
    ToolSchema,
)

# name -> "module:factory"
BACKENDS: dict[str, str] = {
    "hf": "librarian.models.hf:make_hf_backend",
    "openai": "librarian.models.openai:OpenAIBackend",
    "scripted": "librarian.models.scripted:make_scripted_backend",
    "vllm": "librarian.models.vllm_backend:make_vllm_backend",
}


def make_backend(name: str, **kwargs: Any) -> PolicyBackend:
    """The backend called `name`, built with `kwargs` (see each factory for its options)."""
    if name not in BACKENDS:
        raise BackendError(f"unknown policy backend {name!r}; choose one of {', '.join(BACKENDS)}")
    module, factory = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), factory)(**kwargs)


__all__ = ["BACKENDS", "BackendError", "FinishReason", "Message", "PolicyBackend", "Sample", "SamplingParams",
           "ToolSchema", "make_backend"]
