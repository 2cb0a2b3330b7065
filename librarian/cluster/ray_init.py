"""Reaching Ray by Ray's own conventions: join a cluster when one is named, else start one here.

A cluster is named by the `address` a command is given (`ray.address=auto`,
`host:6379`, `ray://host:10001`; `--ray-address` for `librarian build`) or,
when none is given, by the `RAY_ADDRESS` environment variable, which
`ray job submit` sets for every job's driver. Joining passes no resources:
the cluster already has them. Starting a local Ray (no address anywhere, or
`address=local`) passes the CPUs the run needs and a short session folder.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass

log = logging.getLogger(__name__)
ENV_ADDRESS = "RAY_ADDRESS"
LOCAL = "local"


@dataclass(frozen=True)
class Connection:
    """How this process reached Ray: `address` joined ('' when it started a local Ray), `owned` when this
    call connected (so the caller disconnects or shuts down with `ray.shutdown()`)."""

    address: str
    owned: bool

    @property
    def joined(self) -> bool:
        return bool(self.address)


def cluster_address(address: str = "") -> str:
    """The cluster to join: `address`, else `$RAY_ADDRESS`; '' means start a local Ray (so does 'local')."""
    chosen = (address or os.environ.get(ENV_ADDRESS, "")).strip()
    return "" if chosen == LOCAL else chosen


def connect(address: str = "", num_cpus: int | None = None, temp_dir: str = "",
            log_to_driver: bool | None = None) -> Connection:
    """Join the cluster `cluster_address(address)` names, or start a local Ray with `num_cpus` CPUs.

    A no-op when Ray is already initialised in this process (`owned` False).
    `temp_dir` is the local Ray's session folder (default: a short folder
    under the system temp dir, since Ray's socket paths must stay under 107
    bytes); it is never passed when joining.
    """
    import ray

    if ray.is_initialized():
        return Connection(cluster_address(address), owned=False)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    target = cluster_address(address)
    if target:
        log.info("joining the Ray cluster at %s", target)
        ray.init(address=target, log_to_driver=True if log_to_driver is None else log_to_driver)
        return Connection(target, owned=True)
    temp = temp_dir or os.path.join(tempfile.gettempdir(), f"ray{os.getuid()}")
    # address="local" even when RAY_ADDRESS is set: an explicit `local` starts a new Ray here
    ray.init(address=LOCAL, num_cpus=num_cpus, include_dashboard=False, _temp_dir=temp,
             log_to_driver=False if log_to_driver is None else log_to_driver, configure_logging=False)
    return Connection("", owned=True)
