"""A cell's identity and figures, shared by its trial and the sweep's report: its MLflow tags and the metrics
picked from its results.

A metric is a dotted path into a cell's results.json: keys, list indexes
(`history.-1.reward`) and `key=value` selectors over a list of mappings
(`rows.name=trained_builder.rho`). A metric's CI is the sibling `<key>_ci`
([low, high]) when the results carry one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

MISSING = object()


def pick(results: Any, path: str) -> Any:
    """The value at a dotted path, or `MISSING`."""
    obj = results
    for part in path.split("."):
        if isinstance(obj, Mapping):
            if part in obj:
                obj = obj[part]
                continue
            return MISSING
        if isinstance(obj, list | tuple):
            if "=" in part:
                key, want = part.split("=", 1)
                found = [x for x in obj if isinstance(x, Mapping) and str(x.get(key)) == want]
                if not found:
                    return MISSING
                obj = found[0]
                continue
            try:
                obj = obj[int(part)]
                continue
            except (ValueError, IndexError):
                return MISSING
        return MISSING
    return obj


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _ci_of(results: Any, path: str) -> list[float] | None:
    head, _, last = path.rpartition(".")
    ci = pick(results, f"{head}.{last}_ci" if head else f"{last}_ci")
    if isinstance(ci, list | tuple) and len(ci) == 2 and all(_number(v) is not None for v in ci):
        return [float(ci[0]), float(ci[1])]
    return None


def cell_metrics(results: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """{path: number} and {path + '_ci': [low, high]} where present; empty `paths`: top-level numbers."""
    if not paths:
        paths = [k for k, v in results.items() if _number(v) is not None]
    out: dict[str, Any] = {}
    for path in paths:
        value = _number(pick(results, path))
        if value is None:
            continue
        out[path] = value
        ci = _ci_of(results, path)
        if ci is not None:
            out[path + "_ci"] = ci
    return out


def cell_tags(name: str, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The MLflow tags of a cell's run."""
    return {"librarian.cell": name, "librarian.overrides": json.dumps(overrides, sort_keys=True, default=str)[:5000]}
