"""Baseline stores, built the way the real builders build: workspace ops on a copy of a flat store.

Every builder has one signature, `(Workspace, options) -> BuildResult`, and
records its ops in the new workspace's trace:

- `flat` (B1): no ops; the raw store as it is;
- `graphrag`: entity co-occurrence communities, one summary per community;
- `hipporag`: triples per document, entity hub documents, entity-sharing links;
- `raptor`: a clustered tree of summaries;
- `autocompaction`: the corpus compacted chunk by chunk into summary files;
- `untrained_builder`: one episode of the Librarian builder role with an untrained policy;
- `flattened`, `shuffled`: ablations of a frozen (usually trained) store.

`build_baseline(name, ws, **options)` picks one by name; unknown options are
an error that names them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from librarian.evaluation.baselines.ablations import AblationOptions, build_flattened, build_shuffled
from librarian.evaluation.baselines.autocompaction import AutoCompactionOptions, build_autocompaction
from librarian.evaluation.baselines.common import BaselineError, BuildResult, extractive_summary
from librarian.evaluation.baselines.graphrag import GraphRAGOptions, build_graphrag
from librarian.evaluation.baselines.hipporag import HippoRAGOptions, build_hipporag
from librarian.evaluation.baselines.raptor import RaptorOptions, build_raptor
from librarian.evaluation.baselines.untrained import UntrainedBuilderOptions, build_untrained_builder
from librarian.workspace import Workspace


def build_flat(ws: Workspace, options: None = None) -> BuildResult:
    """B1: a copy of the store with no ops."""
    return BuildResult("flat", ws.copy(), 0, 0, {})


BASELINES: dict[str, tuple[Callable[..., BuildResult], type | None]] = {
    "flat": (build_flat, None),
    "graphrag": (build_graphrag, GraphRAGOptions),
    "hipporag": (build_hipporag, HippoRAGOptions),
    "raptor": (build_raptor, RaptorOptions),
    "autocompaction": (build_autocompaction, AutoCompactionOptions),
    "untrained_builder": (build_untrained_builder, UntrainedBuilderOptions),
    "flattened": (build_flattened, AblationOptions),
    "shuffled": (build_shuffled, AblationOptions),
}
ABLATIONS = ("flattened", "shuffled")


def build_baseline(name: str, ws: Workspace, **options: Any) -> BuildResult:
    """The baseline `name` built from `ws` (left unchanged) with `options` for its options dataclass."""
    if name not in BASELINES:
        raise BaselineError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
    fn, opts_type = BASELINES[name]
    if opts_type is None:
        if options:
            raise BaselineError(f"baseline {name!r} takes no options, got {sorted(options)}")
        return fn(ws)
    known = {f.name for f in fields(opts_type)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise BaselineError(f"baseline {name!r}: unknown option(s) {unknown}; known: {sorted(known)}")
    result = fn(ws, opts_type(**options))
    result.name = name
    return result


__all__ = ["ABLATIONS", "BASELINES", "AblationOptions", "AutoCompactionOptions", "BaselineError", "BuildResult",
           "GraphRAGOptions", "HippoRAGOptions", "RaptorOptions", "UntrainedBuilderOptions", "build_autocompaction",
           "build_baseline", "build_flat", "build_flattened", "build_graphrag", "build_hipporag", "build_raptor",
           "build_shuffled", "build_untrained_builder", "extractive_summary"]
