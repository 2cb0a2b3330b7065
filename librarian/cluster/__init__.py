"""Ray actors and pools: answerer probe workers (more to come: builder rollout workers, the learner).

Importing this package does not import Ray; the actors are created when a pool starts.
"""

from librarian.cluster.probe_pool import ProbeError, ProbePool, init_ray

__all__ = ["ProbeError", "ProbePool", "init_ray"]
