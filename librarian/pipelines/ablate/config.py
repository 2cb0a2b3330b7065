"""`librarian ablate`'s config and its expansion into cells (pure functions, no Ray).

A sweep is a `pipeline` (a name in `registry.PIPELINES`, or `module:function`), a
`base` (the pipeline's YAML files and overrides), a `grid` (dotted key ->
list of values; the cartesian product) and/or explicit `cells` ({name,
overrides, resources}), optionally replicated over `seeds`, and optionally
searched (`search: random | optuna` over `space`, `num_samples` trials per
cell). `sweep_cells` turns it into `Cell`s, each with a filesystem-safe unique
name; `validate` loads each cell's config through the pipeline's own `load_config`
(and check), so a typo fails before anything runs, with the cell and the key
named; `placement` sizes a cell's Ray Tune trial from its config.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from librarian.cluster.topology import RayConfig
from librarian.config import ConfigError, load_config
from librarian.pipelines.registry import pipeline

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
CELL_FIELDS = ("name", "overrides", "resources")
RESOURCE_FIELDS = ("cpus", "gpus", "custom")
SEARCHES = ("grid", "random", "optuna")
SCHEDULERS = ("fifo", "asha")


@dataclass
class BaseConfig:
    """What every cell starts from: the pipeline's YAML files (merged in order) and overrides."""

    config: list = field(default_factory=list)
    overrides: dict = field(default_factory=dict)  # dotted key -> value, e.g. {rollout.options: {model: tiny}}


@dataclass
class ResourcesConfig:
    """A cell's trial on the cluster; -1: a bundle per actor of the pipeline's config (CPUs, GPUs)."""

    cpus: float = -1.0  # >= 0: one bundle of this many CPUs that the cell's actors share
    gpus: float = -1.0
    custom: dict = field(default_factory=dict)  # Ray custom resources the trial holds, e.g. {learner_node: 1}


@dataclass
class ObjectiveConfig:
    """The per-step metric a search and a scheduler optimise (reported by the pipeline through its Tracker)."""

    metric: str = "reward"
    mode: str = "max"  # max | min


@dataclass
class AshaConfig:
    """Ray Tune's ASHA: at each rung (grace_period x reduction_factor^k reports) stop the worse trials."""

    grace_period: int = 1  # reports (pipeline steps) before a trial can be stopped
    reduction_factor: int = 2  # keep the best 1/reduction_factor at each rung
    max_t: int = 100  # the largest rung considered (trials are never stopped for reaching it)


@dataclass
class AblateConfig:
    """What `librarian ablate` runs; override any field as key=value."""

    out_dir: str = "build/ablate"
    pipeline: str = "train_builder"
    base: BaseConfig = field(default_factory=BaseConfig)
    grid: dict = field(default_factory=dict)  # dotted key -> list of values (cartesian product)
    cells: list = field(default_factory=list)  # explicit cells: {name, overrides, resources}
    seeds: list = field(default_factory=list)  # replicate every cell once per seed (sets `seed_key`)
    seed_key: str = "seed"
    metrics: list = field(default_factory=list)  # dotted paths into a cell's results (empty: top-level numbers)
    search: str = "grid"  # grid (the cells as planned) | random | optuna (sample `space`)
    space: dict = field(default_factory=dict)  # dotted key -> {loguniform: [lo, hi]} | {choice: [..]} | ...
    num_samples: int = 1  # search: trials sampled per cell
    sample_seed: int = 0  # search: seed of the sampler
    scheduler: str = "fifo"  # fifo (every trial runs to the end) | asha (stop poor trials early)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    asha: AshaConfig = field(default_factory=AshaConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    max_concurrent: int = 0  # 0: as many as the cluster's resources allow
    retries: int = 1  # extra attempts of a failed cell
    timeout_s: float = 0.0  # per attempt; 0: no limit
    rerun: bool = False  # True: start the sweep over (the previous Tune experiment is kept aside)
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else ablate)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir; cells log there too)
    n_boot: int = 2000
    ray: RayConfig = field(default_factory=RayConfig)


# --- overrides and names ----------------------------------------------------------------------------------
def normalize(overrides: Any, where: str) -> dict[str, Any]:
    """Overrides as {dotted key: value}, from a mapping or a list of `key=value` strings."""
    if overrides is None:
        return {}
    if isinstance(overrides, Mapping):
        return {str(k): v for k, v in overrides.items()}
    if isinstance(overrides, list | tuple):
        out: dict[str, Any] = {}
        for item in overrides:
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError(f"{where}: override {item!r} is not key=value")
            key, value = item.split("=", 1)
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        return out
    raise ConfigError(f"{where}: overrides must be a mapping or a list of key=value, got {type(overrides).__name__}")


def render(overrides: Mapping[str, Any]) -> list[str]:
    """`key=value` arguments for `load_config` (values as JSON, which YAML reads back unchanged)."""
    return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]


def _slug(text: str) -> str:
    return re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._-]", "-", text)).strip("-.") or "x"


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float | str) else json.dumps(value, sort_keys=True)


def cell_name(overrides: Mapping[str, Any]) -> str:
    """A filesystem-safe name from overrides: `every-1_gamma-0.9` (full keys where last parts clash)."""
    if not overrides:
        return "base"
    tails = [k.rsplit(".", 1)[-1] for k in overrides]
    parts = [f"{k if tails.count(t) > 1 else t}-{_value_text(v)}" for (k, v), t in zip(overrides.items(), tails,
                                                                                          strict=True)]
    name = re.sub(r"^[^A-Za-z0-9]+", "", "_".join(_slug(p) for p in parts)) or "cell"
    if len(name) > 80:
        digest = hashlib.sha1(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:8]
        name = name[:71].rstrip("-._") + "-" + digest
    return name


def unique(names: Sequence[str]) -> list[str]:
    """Names made unique by suffixes -2, -3, ... (the first keeps its name)."""
    seen: set[str] = set(names)
    counts: dict[str, int] = {}
    out = []
    for n in names:
        counts[n] = counts.get(n, 0) + 1
        if counts[n] == 1:
            out.append(n)
            continue
        k = counts[n]
        while f"{n}-{k}" in seen:
            k += 1
        seen.add(f"{n}-{k}")
        out.append(f"{n}-{k}")
    return out


def flatten_grid(grid: Mapping[str, Any], prefix: str = "") -> dict[str, list]:
    """A grid with nested keys (`reward: {every: [..]}`) as dotted keys; every leaf must be a non-empty list."""
    out: dict[str, list] = {}
    for key, value in grid.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_grid(value, full + "."))
        elif isinstance(value, list | tuple) and value:
            out[full] = list(value)
        else:
            raise ConfigError(f"grid.{full}: needs a non-empty list of values, got {value!r}")
    return out


def grid_cells(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cartesian product of a grid, in key order (the last key varies fastest)."""
    flat = flatten_grid(grid)
    if not flat:
        return []
    keys = list(flat)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(flat[k] for k in keys))]


@dataclass
class Cell:
    """One cell of the sweep: its name, its overrides (over base), its group (seed replicates) and footprint."""

    name: str
    overrides: dict[str, Any]
    group: str
    resources: dict[str, Any]
    config: Any = None  # the pipeline's validated config


def sweep_cells(cfg: AblateConfig) -> list[Cell]:
    """Cells from grid, explicit cells and seeds (no validation of the pipeline's keys yet)."""
    cells: list[tuple[str | None, dict[str, Any], dict[str, Any]]] = [(None, o, {}) for o in grid_cells(cfg.grid)]
    for i, entry in enumerate(cfg.cells):
        where = f"cells[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: a cell is a mapping {{name, overrides, resources}}, got {entry!r}")
        bad = [k for k in entry if k not in CELL_FIELDS]
        if bad:
            raise ConfigError(f"{where}: unknown field(s) {bad}; a cell has {', '.join(CELL_FIELDS)}")
        name = entry.get("name") or None
        if name is not None and not NAME_RE.match(str(name)):
            raise ConfigError(f"{where}: name {name!r} is not filesystem-safe (letters, digits, '.', '_', '-'; "
                              "100 at most, not starting with '.' or '-')")
        res = dict(entry.get("resources") or {})
        bad = [k for k in res if k not in RESOURCE_FIELDS]
        if bad:
            raise ConfigError(f"{where}: unknown resources field(s) {bad}; use {', '.join(RESOURCE_FIELDS)}")
        cells.append((None if name is None else str(name), normalize(entry.get("overrides"), where), res))
    if not cells:
        cells = [("base", {}, {})]
    given = [n for n, _, _ in cells if n is not None]
    dupes = sorted({n for n in given if given.count(n) > 1})
    if dupes:
        raise ConfigError(f"cells: duplicate names {dupes}")
    out: list[Cell] = []
    for name, overrides, res in cells:
        stem = name or cell_name({k: v for k, v in overrides.items() if k != cfg.seed_key})
        if cfg.seeds:
            for seed in cfg.seeds:
                if cfg.seed_key in overrides:
                    raise ConfigError(f"cell {stem!r} sets {cfg.seed_key} and seeds is given; use one of them")
                out.append(Cell(f"{stem}_{cfg.seed_key}-{_slug(_value_text(seed))}",
                                {**overrides, cfg.seed_key: seed}, stem, res))
        else:
            base_name = name or cell_name(overrides)
            out.append(Cell(base_name, overrides, stem, res))
    names = unique([c.name for c in out])
    labels: dict[str, str] = {}
    for c, n in zip(out, names, strict=True):
        c.name = n
        key = json.dumps({k: v for k, v in c.overrides.items() if k != cfg.seed_key}, sort_keys=True, default=str)
        c.group = labels.setdefault(key, c.group)  # cells that differ only by seed share a group
    return out


# --- pipeline configs -----------------------------------------------------------------------------------------
def _has(schema: type, dotted: str) -> bool:
    try:
        return OmegaConf.select(OmegaConf.structured(schema), dotted, throw_on_missing=False,
                                default="__absent__") != "__absent__"
    except Exception:  # noqa: BLE001 - a key that cannot be selected is absent
        return False


def tracking_overrides(schema: type, uri: str, experiment: str) -> dict[str, Any]:
    """The keys through which a pipeline's config names its MLflow store and experiment (those it has)."""
    out: dict[str, Any] = {}
    for key, value in (("tracking_uri", uri), ("experiment", experiment), ("tracking.enabled", True),
                       ("tracking.uri", uri), ("tracking.experiment", experiment)):
        if _has(schema, key):
            out[key] = value
    return out


def trial_overrides(schema: type) -> dict[str, Any]:
    """Keys every cell runs with inside a trial: its actors go into the trial's placement group, not a new one."""
    return {"ray.placement_group": False} if _has(schema, "ray.placement_group") else {}


def validate(cfg: AblateConfig, cells: list[Cell], out_dir: Path, tracking: Mapping[str, Any] | None = None
             ) -> list[Cell]:
    """Each cell's pipeline config through the pipeline's `load_config` (and check); errors name the cell."""
    schema, _, check = pipeline(cfg.pipeline).load()
    base = [f"config={f}" for f in cfg.base.config] + render(normalize(cfg.base.overrides, "base.overrides"))
    for cell in cells:
        forced = {"out_dir": str(out_dir / "cells" / cell.name), **(tracking or {})}
        try:
            cell.config = load_config(schema, base + render(cell.overrides) + render(forced))
            if check is not None:
                check(cell.config)
        except ConfigError as exc:
            raise ConfigError(f"cell {cell.name!r}: {exc}") from None
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"cell {cell.name!r}: {exc}") from None
    return cells


def _get(obj: Any, dotted: str, default: float = 0.0) -> float:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return default
    return float(obj) if isinstance(obj, int | float) and not isinstance(obj, bool) else default


def actor_bundles(config: Any) -> list[dict[str, float]]:
    """One bundle per actor a pipeline config starts: learner ranks, rollout, probe and eval workers."""
    out = [{"CPU": _get(config, "ray.learner_cpus"), "GPU": _get(config, "ray.learner_gpus")}
           for _ in range(max(1, int(_get(config, "learner.workers", 1.0))))]
    out += [{"CPU": _get(config, "rollout.cpus_per_worker"), "GPU": _get(config, "rollout.gpus_per_worker")}
            for _ in range(int(_get(config, "rollout.workers")))]
    out += [{"CPU": 1.0, "GPU": _get(config, "probe.gpus_per_worker")} for _ in range(int(_get(config, "probe.workers")))]
    out += [{"CPU": 1.0} for _ in range(int(_get(config, "workers")))]
    return [{k: v for k, v in b.items() if v} for b in out if any(b.values())]


@dataclass(frozen=True)
class TrialPlacement:
    """A cell's trial: `head` (what the trial process holds), the `bundles` its actors fill, the strategy."""

    head: dict
    bundles: list
    strategy: str = "PACK"

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for b in [self.head, *self.bundles]:
            for k, v in b.items():
                out[k] = out.get(k, 0.0) + float(v)
        return out


def placement(cfg: AblateConfig, cell: Cell) -> TrialPlacement:
    """A cell's resources: its own over the sweep's; -1: a bundle per actor of its config (one CPU when it
    starts none); cpus/gpus >= 0: one bundle of that size that its actors share."""
    res = {"cpus": cfg.resources.cpus, "gpus": cfg.resources.gpus, "custom": dict(cfg.resources.custom),
           **cell.resources}
    actors = actor_bundles(cell.config) or [{"CPU": 1.0}]
    strategy = str(getattr(getattr(cell.config, "ray", None), "strategy", "PACK") or "PACK")
    head = {str(k): float(v) for k, v in dict(res.get("custom") or {}).items() if v}
    cpus, gpus = float(res.get("cpus", -1)), float(res.get("gpus", -1))
    if cpus < 0 and gpus < 0:
        return TrialPlacement(head, actors, strategy)
    auto = TrialPlacement({}, actors).total()
    one = {"CPU": cpus if cpus >= 0 else auto.get("CPU", 0.0), "GPU": gpus if gpus >= 0 else auto.get("GPU", 0.0)}
    one = {k: v for k, v in one.items() if v}
    if not one and not head:
        raise ConfigError(f"cell {cell.name!r}: resources reserve nothing (cpus 0, gpus 0, no custom); a Ray Tune "
                          "trial needs some resource")
    return TrialPlacement(head, [one] if one else [], strategy)


def check(cfg: AblateConfig) -> None:
    """Raise `ConfigError` naming the first bad sweep setting."""
    if cfg.retries < 0:
        raise ConfigError(f"retries must be >= 0, got {cfg.retries}")
    if cfg.max_concurrent < 0:
        raise ConfigError(f"max_concurrent must be >= 0 (0: as the resources allow), got {cfg.max_concurrent}")
    if cfg.timeout_s < 0:
        raise ConfigError(f"timeout_s must be >= 0 (0: no limit), got {cfg.timeout_s}")
    for key, value, allowed in (("search", cfg.search, SEARCHES), ("scheduler", cfg.scheduler, SCHEDULERS),
                                ("objective.mode", cfg.objective.mode, ("max", "min"))):
        if value not in allowed:
            raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    if cfg.num_samples < 1:
        raise ConfigError(f"num_samples must be >= 1, got {cfg.num_samples}")
    if cfg.search == "grid" and (cfg.space or cfg.num_samples > 1):
        raise ConfigError("space and num_samples need search: random or optuna (a grid runs the planned cells; "
                          "replicate with seeds)")
    if cfg.search != "grid" and not cfg.space:
        raise ConfigError(f"search: {cfg.search} samples `space` (e.g. space={{learner.lr: {{loguniform: [1e-6, "
                          "1e-4]}}}), which is empty")
    if cfg.search == "optuna" and (cfg.grid or cfg.cells or cfg.seeds):
        raise ConfigError("search: optuna samples one base cell; grid, cells and seeds need search: grid or random")
    if (cfg.scheduler != "fifo" or cfg.search == "optuna") and not cfg.objective.metric:
        raise ConfigError("objective.metric must name a per-step metric of the pipeline (e.g. reward)")
    if cfg.asha.grace_period < 1 or cfg.asha.reduction_factor < 2 or cfg.asha.max_t < cfg.asha.grace_period:
        raise ConfigError(f"asha needs grace_period >= 1, reduction_factor >= 2 and max_t >= grace_period, got "
                          f"{cfg.asha}")
    if not isinstance(cfg.grid, Mapping):
        raise ConfigError("grid must be a mapping of dotted key -> list of values")
    bad = [m for m in cfg.metrics if not isinstance(m, str) or not m]
    if bad:
        raise ConfigError(f"metrics must be dotted paths (strings), got {bad}")
    pipeline(cfg.pipeline)


def load(args: Sequence[str]) -> AblateConfig:
    """The sweep config from `--config FILE` / `config=FILE` and key=value overrides."""
    cfg = load_config(AblateConfig, args)
    check(cfg)
    return cfg
