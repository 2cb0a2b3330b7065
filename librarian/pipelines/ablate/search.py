"""A sweep as Ray Tune sees it: the param space (planned cells, sampled ranges), the search algorithm,
the scheduler and the cell each trial runs.

A trial's config is `{"cell": {name, group, overrides}}`, plus `{"space":
{dotted key: sampled value}}` under `search: random | optuna`. `space`
entries are one distribution each, Tune's names and arguments:
`{loguniform: [1e-6, 1e-4]}`, `{uniform: [0, 1]}`, `{randint: [1, 8]}`,
`{choice: [0.9, 1.0]}`, `{quniform: [0, 1, 0.1]}`, ...
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from librarian.config import ConfigError
from librarian.pipelines.ablate.config import AblateConfig, Cell

DISTRIBUTIONS = ("uniform", "quniform", "loguniform", "qloguniform", "randn", "qrandn", "randint", "qrandint",
                 "lograndint", "qlograndint", "choice")


def flatten_space(space: Mapping[str, Any], prefix: str = "") -> dict[str, tuple[str, list]]:
    """`space` as {dotted key: (distribution, arguments)}; nested keys (`learner: {lr: {...}}`) are joined."""
    out: dict[str, tuple[str, list]] = {}
    for key, value in space.items():
        full = f"{prefix}{key}"
        if not isinstance(value, Mapping) or not value:
            raise ConfigError(f"space.{full}: needs one distribution, e.g. {{loguniform: [1e-6, 1e-4]}}, "
                              f"got {value!r}")
        names = [k for k in value if k in DISTRIBUTIONS]
        if names and len(value) == 1:
            args = value[names[0]]
            if not isinstance(args, list | tuple) or not args:
                raise ConfigError(f"space.{full}.{names[0]}: needs a list of arguments, got {args!r}")
            out[full] = (names[0], list(args))
        elif names or not all(isinstance(v, Mapping) for v in value.values()):
            raise ConfigError(f"space.{full}: one of {', '.join(DISTRIBUTIONS)} (and nothing else), "
                              f"got {sorted(value)}")
        else:
            out.update(flatten_space(value, full + "."))
    return out


def domains(space: Mapping[str, Any]) -> dict[str, Any]:
    """{dotted key: Tune domain}; a bad range names its key."""
    from ray import tune

    out = {}
    for key, (name, args) in flatten_space(space).items():
        try:
            out[key] = tune.choice(args) if name == "choice" else getattr(tune, name)(*args)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"space.{key}: {name}{args} is not a valid range ({exc})") from None
    return out


def plain(value: Any) -> Any:
    """A sampled value as plain Python (numpy scalars unwrapped) so it renders as YAML."""
    return value.item() if hasattr(value, "item") and not isinstance(value, list | dict | str) else value


def sample(space: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """One value per key of `space`, for validating the keys before any trial runs."""
    rng = random.Random(seed)
    return {k: plain(d.sample(random_state=rng.randrange(2**31))) for k, d in domains(space).items()}


def cell_entry(cell: Cell) -> dict[str, Any]:
    return {"name": cell.name, "group": cell.group, "overrides": dict(cell.overrides)}


def param_space(cfg: AblateConfig, cells: Sequence[Cell]) -> dict[str, Any]:
    """Tune's param space: a grid over the cells (one cell: a constant), sampled `space` under a search."""
    from ray import tune

    entries = [cell_entry(c) for c in cells]
    out: dict[str, Any] = {"cell": tune.grid_search(entries) if len(entries) > 1 else entries[0]}
    if cfg.search != "grid":
        out["space"] = domains(cfg.space)
    return out


def trial_cell(config: Mapping[str, Any], trial_id: str) -> tuple[str, str, dict[str, Any]]:
    """(name, group, overrides) of the cell a trial runs; a sampled trial is named `<cell>-<trial number>`."""
    cell = config["cell"]
    sampled = {k: plain(v) for k, v in (config.get("space") or {}).items()}
    if not sampled:
        return cell["name"], cell["group"], dict(cell["overrides"])
    name = f"{cell['name']}-{trial_id.rsplit('_', 1)[-1]}"
    return name, name, {**cell["overrides"], **sampled}


def trial_name(trial: Any) -> str:
    """Tune's trial name and folder: the cell's name."""
    return trial_cell(trial.config, trial.trial_id)[0]


def tune_config(cfg: AblateConfig) -> Any:
    """`TuneConfig`: search algorithm, scheduler, samples, concurrency, the objective when something uses it."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    search: Any = BasicVariantGenerator(random_state=cfg.sample_seed) if cfg.search == "random" else None
    if cfg.search == "optuna":
        try:
            from ray.tune.search.optuna import OptunaSearch

            search = OptunaSearch(seed=cfg.sample_seed)
        except (ImportError, AssertionError) as exc:
            raise ConfigError(f"search: optuna needs the optuna package ({exc}); pip install optuna") from None
    scheduler = None
    if cfg.scheduler == "asha":
        a = cfg.asha
        scheduler = ASHAScheduler(time_attr="training_iteration", grace_period=a.grace_period,
                                  reduction_factor=a.reduction_factor, max_t=a.max_t, stop_last_trials=False)
    objective = cfg.search == "optuna" or scheduler is not None
    return tune.TuneConfig(search_alg=search, scheduler=scheduler, num_samples=cfg.num_samples,
                           max_concurrent_trials=cfg.max_concurrent or None,
                           metric=cfg.objective.metric if objective else None,
                           mode=cfg.objective.mode if objective else None,
                           trial_name_creator=trial_name, trial_dirname_creator=trial_name)
