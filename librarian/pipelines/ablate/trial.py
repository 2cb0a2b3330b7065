"""The trainable of a `librarian ablate` sweep: one Ray Tune trial runs one cell's pipeline.

In the trial's process it loads the cell's config (base + the cell's
overrides + sampled values + the sweep's forced keys: `out_dir`, tracking,
`ray.placement_group: false` so the pipeline's actors go into the trial's
placement group), exports the sweep's MLflow parent run to the pipeline's
`Tracker` (`LIBRARIAN_*` environment variables), forwards every per-step
metric the pipeline logs to `tune.report` (what ASHA decides on), runs the
pipeline and returns its results: the chosen metrics under `sweep`, the
whole results under `results`, and `cell_finished` (a trial without it was
stopped early).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian.cluster.tune_sweep import DONE_KEY, reporting_steps
from librarian.config import load_config
from librarian.pipelines.ablate.cells import cell_metrics, cell_tags
from librarian.pipelines.ablate.config import render
from librarian.pipelines.ablate.search import trial_cell
from librarian.pipelines.registry import pipeline


@dataclass(frozen=True)
class TrialPlan:
    """What every trial of a sweep shares (sent once through Ray's object store)."""

    pipeline: str
    base_args: list  # config=FILE ... and base overrides as key=value
    forced: dict  # tracking keys and trial_overrides, over every cell
    cells_dir: str  # a cell writes to cells_dir/<name>
    env: dict = field(default_factory=dict)  # LIBRARIAN_PARENT_RUN_ID, _TRACKING_URI, _EXPERIMENT
    metrics: list = field(default_factory=list)  # the paths compared in the report


def cell_config(plan: TrialPlan, name: str, overrides: Mapping[str, Any]) -> Any:
    """The pipeline's config of a cell, validated by the pipeline's `load_config` and check."""
    schema, _, check = pipeline(plan.pipeline).load()
    forced = {**plan.forced, "out_dir": str(Path(plan.cells_dir) / name)}
    config = load_config(schema, [*plan.base_args, *render(overrides), *render(forced)])
    if check is not None:
        check(config)
    return config


def run_trial(config: dict, plan: TrialPlan) -> dict[str, Any]:
    """Run the cell of a trial (see the module docstring)."""
    from ray import tune


    name, _, overrides = trial_cell(config, tune.get_context().get_trial_id())
    os.environ.update({**plan.env, "LIBRARIAN_RUN_TAGS": json.dumps(cell_tags(name, overrides))})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = cell_config(plan, name, overrides)
    _, run, _ = pipeline(plan.pipeline).load()
    with reporting_steps({}) as last:
        results = json.loads(json.dumps(run(cfg), default=str))  # plain data for Tune's result files
    return {**last, "sweep": cell_metrics(results, plan.metrics), "results": results, DONE_KEY: True}
