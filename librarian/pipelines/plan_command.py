"""`librarian plan`: a job's config validated exactly as its pipeline validates it, then placed onto cluster files.

    librarian plan --config configs/train_builder.yaml --config configs/cluster.yaml \\
        [--cluster infra/ray/cluster.yaml ...] [--pipeline train_builder] [key=value ...]

The pipeline is `--pipeline NAME`, else the one whose config knows the most of the keys the files and the
`key=value` overrides set (ties go to the first of `registry.PIPELINES`; a sweep config, with `pipeline`
and `base`, is `librarian ablate`). Its config class is built with `load_config` and its check, as `librarian
<pipeline>` builds it: an unknown key (with the closest valid one), a bad value or an inconsistent setting is
one line on stderr, naming the pipeline, and exit 2, before anything is placed. A sweep validates every cell,
as `librarian ablate` does, and plans the first. The validated config, every default filled in, is what
`librarian.planning.job_plan` places and budgets; the report names the pipeline it assumed.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from librarian.config import ConfigError, describe, load_config, split_args, to_plain
from librarian.pipelines.ablate.config import AblateConfig, sweep_cells, validate
from librarian.pipelines.ablate.config import load as load_sweep
from librarian.pipelines.registry import PIPELINES
from librarian.planning.cluster_file import load_cluster
from librarian.planning.job_plan import DEFAULT_CLUSTERS, default_clusters, place_job, render


@dataclass
class Job:
    """A validated job: its pipeline, its config as plain data, and how the pipeline was chosen."""

    pipeline: str
    config: dict[str, Any]
    how: str  # "given" | "guessed from its keys" | "named by the sweep"
    cell: str = ""  # a sweep: the cell planned


def _leaves(data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict) or not data:
        return [prefix.rstrip(".")] if prefix else []
    return [k for key, value in data.items() for k in _leaves(value, f"{prefix}{key}.")]


def set_keys(files: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """The dotted keys the files and the overrides set (unvalidated; what picks the pipeline)."""
    keys: list[str] = []
    for name in files:
        if Path(name).is_file():
            loaded = OmegaConf.to_container(OmegaConf.load(name), resolve=False)
            keys += _leaves(loaded if isinstance(loaded, dict) else {})
    return keys + [o.split("=", 1)[0].lstrip("-") for o in overrides if "=" in o]


@functools.cache
def _schema_keys(schema: type) -> frozenset[str]:
    return frozenset(d.key for d in describe(schema))


def known(schema: type, key: str) -> bool:
    """Whether `schema` has `key`, or a free-form dict (a backend's options) that holds it."""
    leaves = _schema_keys(schema)
    parts = key.split(".")
    return any(".".join(parts[:i]) in leaves for i in range(1, len(parts) + 1))


def guess(keys: Sequence[str]) -> str:
    """The pipeline whose config knows the most of `keys` (the first in `PIPELINES` on a tie); a sweep: ablate."""
    tops = {k.split(".", 1)[0] for k in keys}
    if {"pipeline", "base"} <= tops:
        return "ablate"
    scores = {name: sum(known(spec.load()[0], k) for k in keys) for name, spec in PIPELINES.items()}
    return max(scores, key=lambda name: scores[name])  # max keeps the first of equal scores


def load_job(files: Sequence[str], overrides: Sequence[str] = (), pipeline: str = "") -> Job:
    """The job's config as `librarian <pipeline>` would build it (`ConfigError` naming the pipeline if it would
    refuse it), as plain data."""
    name = pipeline or guess(set_keys(files, overrides))
    how = "given" if pipeline else "guessed from its keys"
    args = [f"config={f}" for f in files] + list(overrides)
    try:
        if name == "ablate":
            return _sweep(args)
        if name not in PIPELINES:
            raise ConfigError(f"--pipeline must be one of {', '.join([*PIPELINES, 'ablate'])}, got {name!r}")
        schema, _, check = PIPELINES[name].load()
        cfg = load_config(schema, args)
        if check is not None:
            check(cfg)
    except (ConfigError, ValueError) as exc:  # ValueError: a section's own validation, as pipeline_main catches
        raise ConfigError(f"{exc} (validated as librarian {name}'s config, {how})") from None
    return Job(name, to_plain(cfg), how)


def _sweep(args: list[str]) -> Job:
    """A sweep: every cell validated by its pipeline (as `librarian ablate` does); the first cell planned."""
    sweep: AblateConfig = load_sweep(args)
    cells = validate(sweep, sweep_cells(sweep), Path(sweep.out_dir))
    return Job(sweep.pipeline, to_plain(cells[0].config), f"named by the sweep, {len(cells)} cell(s) validated",
               cells[0].name)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="librarian plan", usage="librarian plan --config FILE [--config FILE ...] [--cluster FILE ...] "
                                     "[--pipeline NAME] [options] [key=value ...]",
        description=("Place a job onto a Ray cluster file and check each GPU's memory, starting nothing; the "
                     "config is validated as its pipeline validates it first."),
        epilog=("key=value overrides follow the options, as for the pipelines (e.g. rollout.workers=8 "
                "out_dir=/shared/runs/x); an unknown key, a bad value or an inconsistent setting exits 2 "
                "naming it. Exit status: 0 fits, 2 a problem or a bad config."))
    parser.add_argument("--config", "-c", action="append", default=[], help="a job config (several merge in order)")
    parser.add_argument("--cluster", action="append", default=[],
                        help=f"a cluster file (launcher or KubeRay); default: {' and '.join(DEFAULT_CLUSTERS)}")
    parser.add_argument("--pipeline", default="", help=f"the pipeline whose config this is ({', '.join(PIPELINES)}, "
                                                       "ablate); default: guessed from the keys")
    parser.add_argument("--policy", default="", help="the policy's HF folder or a known architecture")
    parser.add_argument("--answerer", default="", help="the answerer's HF folder or a known architecture")
    parser.add_argument("--gpu-memory", type=float, default=0.0, help="GiB of every GPU (overrides the tables)")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args, rest = _parser().parse_known_args(list(sys.argv[1:] if argv is None else argv))
    try:
        files, overrides = split_args(rest)  # the pipelines' own reading of config= and key=value
        files = args.config + files
        if not files:
            raise ConfigError("give at least one --config FILE")
        clusters = args.cluster or default_clusters()
        if not clusters:
            raise ConfigError(f"no --cluster FILE given and none of {', '.join(DEFAULT_CLUSTERS)} here")
        job = load_job(files, overrides, args.pipeline)
        reports = [place_job(job.config, load_cluster(c, args.gpu_memory), args.policy, args.answerer) for c in clusters]
    except ConfigError as exc:
        print(f"librarian plan: {exc}", file=sys.stderr)
        return 2
    pipeline = f"pipeline: {job.pipeline} ({job.how}; --pipeline NAME picks another)"
    title = " + ".join(files) + (f" (cell {job.cell} of the sweep)" if job.cell else "")
    for r in reports:
        r.lines.insert(0, pipeline)
    if args.json:
        print(json.dumps([{**asdict(r), "ok": r.ok, "pipeline": job.pipeline} for r in reports], indent=1))
    else:
        print("\n\n".join(render(r, title) for r in reports))
    return 0 if all(r.ok for r in reports) else 2
