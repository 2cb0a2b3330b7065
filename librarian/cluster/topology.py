"""Where the actors go: Ray start-up, one placement group for the learner and the rollout workers,
and each actor's resources from config.

Bundles: [learner, rollout 0, rollout 1, ...]; the strategy (`PACK`,
`SPREAD`, `STRICT_PACK`, `STRICT_SPREAD`) decides whether they share nodes.
The probe pool (`librarian.cluster.probe_pool`) schedules its own workers
with one CPU each, outside the group.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class TopologyError(ValueError):
    """Bad resource settings; the message names the field."""


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


def start(ray_cfg: RayConfig, needed_cpus: float) -> bool:
    """Join or start Ray (`librarian.cluster.ray_init`) unless it is running; True when this call connected
    (so the caller shuts it down). Only a local Ray gets `num_cpus` and `temp_dir`."""
    from librarian.cluster.ray_init import connect

    cpus = ray_cfg.num_cpus or max(int(needed_cpus + 0.999), os.cpu_count() or 1)
    return connect(ray_cfg.address, num_cpus=cpus, temp_dir=ray_cfg.temp_dir).owned


class Topology:
    """The placement group (if any) and the actor options of the learner and each rollout worker."""

    def __init__(self, ray_cfg: RayConfig, rollout: Resources, workers: int) -> None:
        check(ray_cfg, rollout, workers)
        self.cfg = ray_cfg
        self.learner = Resources(ray_cfg.learner_cpus, ray_cfg.learner_gpus)
        self.rollout = rollout
        self.workers = workers
        self.group: Any = None

    def bundles(self) -> list[dict[str, float]]:
        return [self.learner.bundle()] + [self.rollout.bundle() for _ in range(self.workers)]

    def reserve(self, timeout_s: float = 300.0) -> None:
        """Create the placement group and wait until Ray has reserved it."""
        if not self.cfg.placement_group:
            return
        import ray
        from ray.util.placement_group import placement_group

        self.group = placement_group(self.bundles(), strategy=self.cfg.strategy)
        ready, _ = ray.wait([self.group.ready()], timeout=timeout_s)
        if not ready:
            raise TopologyError(f"Ray could not reserve {self.bundles()} ({self.cfg.strategy}) within "
                                f"{timeout_s:.0f} s; lower the cpus/gpus per actor or add nodes")

    def _options(self, res: Resources, bundle: int) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": res.cpus, "num_gpus": res.gpus}
        if self.group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle)
        return opts

    def learner_options(self) -> dict[str, Any]:
        return self._options(self.learner, 0)

    def rollout_options(self) -> list[dict[str, Any]]:
        env = self.cfg.rollout_runtime_env
        extra = {"runtime_env": dict(env)} if env else {}
        return [{**self._options(self.rollout, 1 + i), **extra} for i in range(self.workers)]

    def release(self) -> None:
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.group)
            self.group = None
