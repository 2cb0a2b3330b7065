"""Ray actors and pools: answerer probe workers, builder rollout workers, the learner (group).

Importing this package imports nothing else: `ProbePool`, `ProbeError` and `init_ray` are loaded from
`probe_pool` on first use, so a module here that needs neither Ray nor the evaluation stack imports on its own.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ProbeError", "ProbePool", "init_ray"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("librarian.cluster.probe_pool"), name)
    raise AttributeError(f"module 'librarian.cluster' has no attribute {name!r}")
