"""Every wait on the learner and the weight sync is bounded, on a real local Ray (2 CPUs, no GPU).

Actors whose methods sleep past a tiny limit stand in for a learner stuck in an NCCL collective: the object-store
publish (`WeightSync.publish`), a missed worker's pull (`resolve`), a broadcast group's set-up
(`BroadcastSync.open`) and a learner group's ranks (`LearnerGroup._all`) each fail after their limit with the
project's own error naming the call, the actor and the config key; a learner group stops its ranks and refuses
work until `recover()`, as after a rank's failure. `RLSession.step` past its limit on a real learner is in test_colocate.py.
"""

from __future__ import annotations

import os
import time

import pytest

from librarian.cluster.actor_pool import ActorPool
from librarian.cluster.learner_group import LearnerGroup, LearnerGroupError
from librarian.cluster.waits import CallTimeoutError, learner_timeout, sft_steps
from librarian.cluster.weight_sync import BroadcastSync, WeightSync
from librarian.cluster.weight_sync_config import BroadcastNote, WeightSyncError
from librarian.cluster.weight_sync_worker import resolve
from librarian.learner import LearnerConfig

pytestmark = pytest.mark.slow
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


class SlowLearner:
    """Answers like a learner, after `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def pid(self) -> int:
        return os.getpid()

    def publish(self, transfer: str = "") -> tuple[int, None]:
        time.sleep(self.seconds)
        return 3, None

    def sync_open(self, *args: object) -> list:
        time.sleep(self.seconds)
        return []

    def broadcast_ranks(self) -> int:
        time.sleep(self.seconds)
        return 1

    def work(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def _slow(ray, seconds: float):
    """A started `SlowLearner` actor (its start is not what the tests time)."""
    actor = ray.remote(SlowLearner).options(num_cpus=0.25).remote(seconds)
    ray.get(actor.pid.remote(), timeout=120)
    return actor


def test_a_publish_past_its_limit_names_the_call_the_actor_and_the_key(ray_session):
    start = time.monotonic()
    with pytest.raises(CallTimeoutError, match=r"publish\(''\) on SlowLearner [0-9a-f]{8} did not finish within "
                                               r"1 s; raise rollout.sync_timeout_s"):
        WeightSync(timeout_s=1).publish(_slow(ray_session, 60))
    assert time.monotonic() - start < 20
    assert WeightSync(timeout_s=0).publish(_slow(ray_session, 0.5)) == 3  # 0: no limit


def test_a_missed_workers_pull_is_bounded_by_the_notes_limit(ray_session):
    note = BroadcastNote(2, {}, _slow(ray_session, 60), timeout_s=1)
    with pytest.raises(CallTimeoutError, match=r"publish\(\) \(a missed broadcast's pull\) on SlowLearner .* "
                                               r"rollout.sync_timeout_s"):
        resolve(note)


def test_opening_a_broadcast_group_is_bounded_on_the_workers_and_on_the_learner(ray_session):
    with ActorPool(SlowLearner, (60,), [{"num_cpus": 0.25}]) as stuck:
        with pytest.raises(WeightSyncError, match=r"asking for broadcast_ranks\(\): rollout worker 0 did not finish "
                                                  r"within 1 s \(rollout.sync_timeout_s\)"):
            BroadcastSync(_slow(ray_session, 0), stuck, "gloo", timeout_s=1).open()
    with ActorPool(SlowLearner, (0,), [{"num_cpus": 0.25}]) as quick:
        quick.ready()  # started: only the learner is slow now
        with pytest.raises(CallTimeoutError, match=r"sync_open\(\) on SlowLearner .* within 1 s; raise "
                                                   r"rollout.sync_timeout_s"):
            BroadcastSync(_slow(ray_session, 60), quick, "gloo", timeout_s=1).open()


def test_a_learner_group_whose_ranks_hang_stops_them_and_refuses_work_until_recover(ray_session):
    from ray.exceptions import RayActorError

    group = LearnerGroup.__new__(LearnerGroup)  # the group's bookkeeping over two hanging "ranks"
    ranks = [_slow(ray_session, 0), _slow(ray_session, 0)]
    group.cfg, group.placements, group.ranks, group.broken = LearnerConfig(call_timeout_s=1), [{}, {}], ranks, ""
    assert group._call("work", 0.1) == [0.1, 0.1]
    start = time.monotonic()
    with pytest.raises(LearnerGroupError, match=r"learner rank\(s\) \[0, 1\] of 2 did not finish work within 1 s "
                                                r"\(learner.call_timeout_s; .*every rank is stopped"):
        group._call("work", 60)
    assert time.monotonic() - start < 20
    with pytest.raises(RayActorError):  # stopped, not left inside the collective
        ray_session.get(ranks[0].pid.remote(), timeout=30)
    with pytest.raises(LearnerGroupError, match="the learner group is stopped .* call recover()"):
        group._call("work", 0.1)


def test_an_sft_call_gets_the_limit_once_per_sft_step():
    cfg = type("Cfg", (), {"call_timeout_s": 10.0})()
    assert sft_steps(10, 2, 4) == 6 and learner_timeout(cfg, "sft", (list(range(10)), 2, 4)) == 60.0
    assert learner_timeout(cfg, "step", ([1, 2],)) == 10.0
    cfg.call_timeout_s = 0.0
    assert learner_timeout(cfg, "sft", (list(range(10)), 2, 4)) == 0.0  # 0: no limit
