"""Starting a run's learner, in one place: one `LearnerActor`, or a `LearnerGroup` of `learner.workers` ranks.

`start_learner(topology, backend, options, cfg)` places it in the topology's
placement group: `cfg.workers` 1 is one actor in the learner bundle (no
process group); more is a `LearnerGroup` actor whose ranks `reserve_learners`
places (the learner bundle and bundles of their own appended after the
rollout workers', or, colocated, bundle i shared with rollout worker i). Both
answer the same methods (`step`, `sft`, `publish`, `save`, `load`, ...).
"""

from __future__ import annotations

from typing import Any

from librarian.cluster.learner_actor import LearnerActor
from librarian.cluster.learner_group import LearnerGroup
from librarian.cluster.topology import Resources, wait_reserved


def _placement_options(group: Any, bundle: int, res: Resources) -> dict[str, Any]:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {"num_cpus": res.cpus, "num_gpus": res.gpus,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle)}


def reserve_learners(topology: Any, workers: int, timeout_s: float | None = None) -> list[dict[str, Any]]:
    """Actor options for `workers` learner ranks of `ray.learner_cpus`/`learner_gpus` each.

    With a placement group the topology's group (learner, rollout workers) is
    re-reserved with ranks 1.. appended as bundles of their own (after the
    rollout bundles, whose indices stay valid), waiting at most
    `ray.reserve_timeout_s` (or `timeout_s`); call it before any actor is
    placed in the group. Without one each rank just asks Ray for its resources.
    """
    if getattr(topology, "colocate", False):  # rank i shares bundle i with rollout worker i
        return [topology.learner_options(rank) for rank in range(workers)]
    if topology.group is None:
        return [topology.learner_options() for _ in range(workers)]
    from ray.util.placement_group import placement_group, remove_placement_group

    bundles = topology.bundles()
    ranks = [0] + list(range(len(bundles), len(bundles) + workers - 1))
    bundles += [topology.learner.bundle()] * (workers - 1)
    remove_placement_group(topology.group)
    topology.group = None
    group = placement_group(bundles, strategy=topology.cfg.strategy)
    wait_reserved(group, bundles, topology.cfg.strategy,
                  topology.cfg.reserve_timeout_s if timeout_s is None else timeout_s,
                  f"{workers} learner ranks (ray.learner_cpus/learner_gpus each) and {topology.workers} rollout "
                  "worker(s)")
    topology.group = group
    return [_placement_options(topology.group, b, topology.learner) for b in ranks]


def start_learner(topology: Any, backend: str, options: dict, cfg: Any, torch_threads: int = 0) -> Any:
    """One `LearnerActor` (`cfg.workers` 1: no process group), or a `LearnerGroup` of `cfg.workers` ranks (the same
    methods); a Ray actor handle either way."""
    import ray

    if cfg.workers == 1:
        return ray.remote(LearnerActor).options(**topology.learner_options()).remote(backend, options, cfg,
                                                                                     torch_threads)
    placements = reserve_learners(topology, cfg.workers)
    return ray.remote(LearnerGroup).options(num_cpus=0).remote(backend, options, cfg, torch_threads, placements)
