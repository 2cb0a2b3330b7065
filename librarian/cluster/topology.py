"""Where the actors go: Ray start-up, one placement group for the learner and the rollout workers,
and each actor's resources from config.

Bundles: [learner, rollout 0, rollout 1, ...]; the strategy (`PACK`,
`SPREAD`, `STRICT_PACK`, `STRICT_SPREAD`) decides whether they share nodes.
Colocated (`rollout.colocate`): one bundle per learner rank, holding that
rank and rollout worker i on the same GPU (each asks for half of the
bundle's GPU, so Ray hands both the same device).
The probe pool (`librarian.cluster.probe_pool`) schedules its own workers
with one CPU each, outside the group. `reserve` waits at most
`ray.reserve_timeout_s`; past it the error names the bundles no node offers.
"""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from librarian.cluster.ray_init import connect
from librarian.config import ConfigError
from librarian.models.vllm_backend import VLLMBackend

log = logging.getLogger(__name__)
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
COLOCATED_SHARE = 0.5  # of a colocated bundle's GPU, asked by its learner rank and by its rollout worker


class TopologyError(ConfigError):
    """Bad resource settings, or resources Ray could not reserve in time; the message names the field."""


@dataclass
class RayConfig:
    """How to reach Ray: a cluster named by `address` or $RAY_ADDRESS is joined, else a local Ray starts."""

    address: str = ""  # '' joins $RAY_ADDRESS when set (as in `ray job submit`), else starts a local Ray; auto,
    # host:port or ray://host:10001 join that cluster; local starts a new one here even when RAY_ADDRESS is set
    num_cpus: int = 0  # local session: logical CPUs (0: enough for every actor, at least os.cpu_count())
    temp_dir: str = ""  # local session: short path (socket paths must stay under 107 bytes)
    placement_group: bool = True
    strategy: str = "PACK"
    learner_cpus: float = 1.0
    learner_gpus: float = 0.0
    rollout_runtime_env: dict = field(default_factory=dict)  # e.g. env_vars for a separate rollout image
    reserve_timeout_s: float = 1200.0  # placement-group wait: an autoscaler starting GPU nodes and pulling images


@dataclass(frozen=True, slots=True)
class Resources:
    """One actor's resources."""

    cpus: float
    gpus: float = 0.0

    def bundle(self) -> dict[str, float]:
        out = {"CPU": float(self.cpus)}
        if self.gpus:
            out["GPU"] = float(self.gpus)
        return out


def check(ray_cfg: RayConfig, rollout: Resources, workers: int) -> None:
    """Raise `TopologyError` naming the first bad setting."""
    if ray_cfg.strategy not in STRATEGIES:
        raise TopologyError(f"ray.strategy must be one of {', '.join(STRATEGIES)}, got {ray_cfg.strategy!r}")
    if workers < 1:
        raise TopologyError(f"rollout.workers must be >= 1, got {workers}")
    for name, v in (("ray.learner_cpus", ray_cfg.learner_cpus), ("ray.learner_gpus", ray_cfg.learner_gpus),
                    ("rollout.cpus_per_worker", rollout.cpus), ("rollout.gpus_per_worker", rollout.gpus)):
        if v < 0:
            raise TopologyError(f"{name} must be >= 0, got {v}")
    if not ray_cfg.reserve_timeout_s > 0:
        raise TopologyError(f"ray.reserve_timeout_s must be > 0, got {ray_cfg.reserve_timeout_s}")


def check_engine_gpus(section: str, backend: str, options: dict, gpus: float) -> None:
    """A vLLM worker reserves the GPUs its engine spans: `<section>.gpus_per_worker` = tensor_parallel_size x
    pipeline_parallel_size of `<section>.options.engine_kwargs`. A one-GPU engine may also ask for a share of a
    GPU or none (engines sharing a GPU, a GPU hidden from Ray, vLLM on CPU)."""
    if backend != "vllm":
        return
    kwargs = dict(dict(options or {}).get("engine_kwargs") or {})
    tp, pp = int(kwargs.get("tensor_parallel_size", 1)), int(kwargs.get("pipeline_parallel_size", 1))
    world = tp * pp
    if (gpus >= 1 or world > 1) and gpus != world:
        raise ConfigError(f"{section}.gpus_per_worker ({gpus:g}) must equal {section}.options.engine_kwargs."
                            f"tensor_parallel_size x pipeline_parallel_size ({tp} x {pp} = {world}): the engine "
                            "uses exactly the GPUs its worker reserves")


def check_engine_start(section: str, backend: str, options: dict, start_timeout_s: float) -> None:
    """A vLLM worker's start includes its engine's: `<section>.start_timeout_s` must outlast the engine's own
    `<section>.options.start_timeout_s` (so the engine's error, which quotes its log, comes first)."""
    if backend != "vllm":
        return

    default = inspect.signature(VLLMBackend).parameters["start_timeout_s"].default
    engine = float(dict(options or {}).get("start_timeout_s", default))
    if start_timeout_s <= engine:
        raise ConfigError(f"{section}.start_timeout_s ({start_timeout_s:g}) must be longer than the engine's own "
                          f"{section}.options.start_timeout_s ({engine:g}): a worker's start includes its engine's")


def wait_reserved(group: Any, bundles: list[dict[str, float]], strategy: str, timeout_s: float, what: str) -> None:
    """Wait for a placement group; past `timeout_s`, remove it and raise naming the bundles Ray could not place."""
    import ray
    from ray.util.placement_group import remove_placement_group

    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if ready:
        return
    remove_placement_group(group)
    nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
    alone = [f"bundle {i} {b}" for i, b in enumerate(bundles)
             if not any(all(r.get(k, 0.0) >= v for k, v in b.items()) for r in nodes)]
    why = (f"no node in the cluster now offers {'; '.join(alone)}" if alone else
           f"each bundle fits a node alone, but not all of {bundles} together")
    raise TopologyError(f"Ray could not reserve the placement group of {what} ({strategy}) within {timeout_s:g} s: "
                        f"{why}. Lower the cpus/gpus per actor, add nodes (`ray status` lists pending demands, "
                        "`librarian plan` a bundle no node type fits), or raise ray.reserve_timeout_s when the "
                        "autoscaler only needs longer")


def start(ray_cfg: RayConfig, needed_cpus: float) -> bool:
    """Join or start Ray (`librarian.cluster.ray_init`) unless it is running; True when this call connected
    (so the caller shuts it down). Only a local Ray gets `num_cpus` and `temp_dir`."""
    cpus = ray_cfg.num_cpus or max(int(needed_cpus + 0.999), os.cpu_count() or 1)
    return connect(ray_cfg.address, num_cpus=cpus, temp_dir=ray_cfg.temp_dir).owned


class Topology:
    """The placement group (if any) and the actor options of the learner and each rollout worker."""

    def __init__(self, ray_cfg: RayConfig, rollout: Resources, workers: int, colocate: bool = False) -> None:
        check(ray_cfg, rollout, workers)
        self.cfg = ray_cfg
        self.learner = Resources(ray_cfg.learner_cpus, ray_cfg.learner_gpus)
        self.rollout = rollout
        self.workers = workers
        self.colocate = colocate  # bundle i: learner rank i and rollout worker i on one GPU
        self.group: Any = None

    def bundles(self) -> list[dict[str, float]]:
        if self.colocate:
            shared = Resources(self.learner.cpus + self.rollout.cpus, self.learner.gpus)
            return [shared.bundle() for _ in range(self.workers)]
        return [self.learner.bundle()] + [self.rollout.bundle() for _ in range(self.workers)]

    def reserve(self, timeout_s: float | None = None) -> None:
        """Create the placement group and wait until Ray has reserved it (`ray.reserve_timeout_s` unless given)."""
        if not self.cfg.placement_group:
            return
        from ray.util.placement_group import placement_group

        bundles = self.bundles()
        group = placement_group(bundles, strategy=self.cfg.strategy)
        wait_reserved(group, bundles, self.cfg.strategy, self.cfg.reserve_timeout_s if timeout_s is None else timeout_s,
                      f"the learner and {self.workers} rollout worker(s)")
        self.group = group

    def _options(self, res: Resources, bundle: int) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": res.cpus, "num_gpus": res.gpus}
        if self.group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle)
        return opts

    def learner_options(self, rank: int = 0) -> dict[str, Any]:
        """Learner rank `rank`'s actor options (only a colocated layout places ranks here by number)."""
        if self.colocate:
            return self._options(Resources(self.learner.cpus, self.learner.gpus * COLOCATED_SHARE), rank)
        return self._options(self.learner, 0)

    def rollout_options(self) -> list[dict[str, Any]]:
        env = self.cfg.rollout_runtime_env
        extra = {"runtime_env": dict(env)} if env else {}
        if self.colocate:
            half = Resources(self.rollout.cpus, self.rollout.gpus * COLOCATED_SHARE)
            return [{**self._options(half, i), **extra} for i in range(self.workers)]
        return [{**self._options(self.rollout, 1 + i), **extra} for i in range(self.workers)]

    def release(self) -> None:
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.group)
            self.group = None
