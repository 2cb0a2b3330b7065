"""Nothing in the pools or the placement groups waits forever, on a real local Ray (2 CPUs, no GPU).

An actor that asks for a GPU no node has never starts: `ready()` fails after
`start_timeout_s` naming the pool, the slot, the request and the key. A work
item that hangs fails `map` after `call_timeout_s`, while items that merely
queue behind others on the same worker do not count their wait. A placement
group Ray cannot place fails after `ray.reserve_timeout_s` naming the bundles.
"""

from __future__ import annotations

import os
import time

import pytest

from librarian.cluster import ProbeError, ProbePool
from librarian.cluster.actor_pool import ActorPool, PoolError
from librarian.cluster.learner_start import reserve_learners
from librarian.cluster.probe_pool import ProbeConfig
from librarian.cluster.rollout_pool import RolloutError, RolloutPool
from librarian.cluster.rollout_worker import RolloutConfig
from librarian.cluster.topology import RayConfig, Resources, Topology, TopologyError

pytestmark = pytest.mark.slow
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


class Sleeper:
    """A worker whose work is sleeping for the item's seconds (its argument is ignored: a config or nothing)."""

    def __init__(self, spec: object = None) -> None:
        self.spec = spec

    def pid(self) -> int:
        return os.getpid()

    def work(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


# Long enough for the placeable worker 0 to start on a loaded machine (`make test` runs two test workers on 2 cores)
START_S = 8


def test_a_worker_no_node_can_place_fails_ready_with_its_request(ray_session):
    pool = ActorPool(Sleeper, (), [{"num_cpus": 0.5}, {"num_cpus": 0.5, "num_gpus": 1}], start_timeout_s=START_S)
    try:
        start = time.monotonic()
        with pytest.raises(PoolError) as err:
            pool.ready()
        assert time.monotonic() - start < 30
        text = str(err.value)
        assert f"worker pool: worker 1 did not start within {START_S} s" in text  # the pool, the slot, what, how long
        assert "0.5 CPU, 1 GPU" in text and "pool.start_timeout_s" in text  # the request and the key
    finally:
        pool.close()


def test_map_on_a_worker_that_never_starts_fails_after_the_start_timeout(ray_session):
    with ActorPool(Sleeper, (), [{"num_cpus": 0.5}, {"num_cpus": 0.5, "num_gpus": 1}], start_timeout_s=START_S,
                   call_timeout_s=600) as pool:  # no ready() first: map itself bounds the start
        start = time.monotonic()
        with pytest.raises(PoolError, match=rf"worker 1 did not start within {START_S} s.*0\.5 CPU, 1 GPU.*"
                                            r"pool\.start_timeout_s"):
            pool.map([0.1] * 4, lambda w, s: w.work.remote(s))
        assert time.monotonic() - start < 30  # not the call timeout
        assert pool.started == [True, False]


def test_probe_and_rollout_pools_name_their_own_keys(ray_session):
    probes = ProbePool.of(ProbeConfig(workers=1, gpus_per_worker=1, start_timeout_s=1.5))  # the section's timeout
    try:
        assert probes.start_timeout_s == 1.5
        with pytest.raises(ProbeError, match=r"probe worker 0 did not start within 1.5 s.*1 CPU, 1 GPU.*"
                                             r"probe\.start_timeout_s"):
            probes.ready()
    finally:
        probes.close()
    spec = RolloutConfig(start_timeout_s=1.5, call_timeout_s=7)  # the workers' rollout section sets the timeouts
    rollouts = RolloutPool(Sleeper, (spec,), [{"num_cpus": 0.5, "num_gpus": 1}])
    try:
        assert (rollouts.start_timeout_s, rollouts.call_timeout_s) == (1.5, 7.0)
        with pytest.raises(RolloutError, match=r"rollout worker 0 did not start.*rollout\.start_timeout_s"):
            rollouts.ready()
    finally:
        rollouts.close()
    with pytest.raises(ProbeError, match="probe.start_timeout_s must be > 0"):
        ProbePool.of(_probe_config(start_timeout_s=0))


def _probe_config(**fields):
    """A `ProbeConfig` with fields set after construction (its own check would refuse them first)."""
    cfg = ProbeConfig(workers=1)
    for k, v in fields.items():
        setattr(cfg, k, v)
    return cfg


def test_a_hung_item_fails_map_but_queueing_does_not_count(ray_session):
    with ActorPool(Sleeper, (), [{"num_cpus": 0.5}], inflight=3, call_timeout_s=1.5) as pool:
        pool.ready()
        # three 1 s items queued on one worker: 3 s in all, yet none runs longer than 1.5 s
        assert pool.map([1.0, 1.0, 1.0], lambda w, s: w.work.remote(s)) == [1.0, 1.0, 1.0]
        start = time.monotonic()
        with pytest.raises(PoolError) as err:
            pool.map([0.1, 60.0, 0.1], lambda w, s: w.work.remote(s))
        assert time.monotonic() - start < 20
        assert "worker 0 did not finish work item 1 within 1.5 s" in str(err.value)
        assert "0.5 CPU" in str(err.value) and "pool.call_timeout_s" in str(err.value)
    with ActorPool(Sleeper, (), [{"num_cpus": 0.5}], call_timeout_s=0) as unlimited:  # 0: no limit
        assert unlimited.map([0.2], lambda w, s: w.work.remote(s)) == [0.2]
    with pytest.raises(PoolError, match="pool.call_timeout_s >= 0"):
        ActorPool(Sleeper, (), [{"num_cpus": 0.5}], call_timeout_s=-1)


def test_call_all_times_out_too(ray_session):
    with ActorPool(Sleeper, (), [{"num_cpus": 0.5}] * 2, call_timeout_s=1) as pool:
        pool.ready()
        assert pool.call_all("work", 0.1) == [0.1, 0.1]
        with pytest.raises(PoolError, match=r"worker 0 \(and 1 other worker\(s\)\) did not answer work\(\) within 1 s"):
            pool.call_all("work", 30)


def test_a_placement_group_ray_cannot_place_names_its_bundles(ray_session):
    from ray.util.placement_group import placement_group_table

    gpu = Topology(RayConfig(learner_cpus=1, learner_gpus=1, reserve_timeout_s=1.5), Resources(0.5), 1)
    with pytest.raises(TopologyError) as err:
        gpu.reserve()
    text = str(err.value)
    assert "within 1.5 s" in text and "no node in the cluster now offers bundle 0 {'CPU': 1.0, 'GPU': 1.0}" in text
    assert "bundle 1" not in text and "ray.reserve_timeout_s" in text  # the rollout bundle fits: not named
    assert gpu.group is None
    assert all(g["state"] == "REMOVED" for g in placement_group_table().values())  # no group left pending

    many = Topology(RayConfig(learner_cpus=1, reserve_timeout_s=1.5), Resources(0.5), 1)
    many.reserve()  # 1.5 CPUs of 2: fits
    try:
        with pytest.raises(TopologyError, match=r"3 learner ranks .*each bundle fits a node alone, but not all of "
                                                r"\[.*\] together.*ray\.reserve_timeout_s"):
            reserve_learners(many, 3)  # 3.5 CPUs
        assert many.group is None
    finally:
        many.release()
