"""Ray actors and pools: what an RL run or a sweep runs on Ray.

- start-up and placement: `ray_init` (join a named cluster, else start one), `topology` (one placement group
  for the learner and the rollout workers, each actor's resources);
- rollouts: `rollout_worker` (one generic `RolloutWorker`: a backend, its weights and their sync, batched
  episodes from an env factory), `builder_worker` and `researcher_worker` (the env factories and worker
  classes), `builder_jobs` and `researcher_jobs` (config sections, jobs, records),
  `rollout_pool` over the fault-tolerant `actor_pool`;
- the answerer probe pool (`probe_pool`: `rewards.probe_exam`'s `ExamRunner` in each worker);
- the learner: `learner_actor` (one `learner.Learner`), `learner_group` (data-parallel ranks), `learner_start`
  (which of the two a run gets, and where); `weight_sync` (publishing to the workers, the driver side: the object store,
  or a broadcast over `models.weight_transfer`), `weight_sync_worker` (a worker's loading and its end of the
  broadcast), `weight_sync_config` (the transport a run gets, what both sides share); `waits` (every wait bounded);
- `tune_sweep` (Ray Tune trials for `librarian ablate`) and `faults` (injected crashes, tests).

`librarian.rl.session.RLSession` starts these for a run. Importing this package imports nothing else:
`ProbePool`, `ProbeError` and `init_ray` are loaded from `probe_pool` on first use, so a module here that needs
neither Ray nor the probe stack imports on its own.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ProbeError", "ProbePool", "init_ray"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("librarian.cluster.probe_pool"), name)
    raise AttributeError(f"module 'librarian.cluster' has no attribute {name!r}")
