"""`ActorPool` on a real local Ray: work spreads over the workers, and results come back in item order.

The workers here wait instead of computing, so the timing does not depend on
how busy the machine's cores are: 8 items of 0.5 s take about 4 s on one
worker and about 2 s on two.
"""

from __future__ import annotations

import os
import time

import pytest

from librarian.cluster.actor_pool import ActorPool, PoolError

pytestmark = pytest.mark.slow
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


class Waiter:
    """A worker whose work is waiting (as a worker waits on a model server or the network)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def pid(self) -> int:
        return os.getpid()

    def work(self, item: int) -> tuple[int, int]:
        time.sleep(self.seconds)
        return item * item, os.getpid()


def _timed(workers: int) -> tuple[float, list]:
    with ActorPool(Waiter, (0.5,), [{"num_cpus": 0.5}] * workers) as pool:
        pool.ready()
        start = time.perf_counter()
        out = pool.map(list(range(8)), lambda w, i: w.work.remote(i))
        return time.perf_counter() - start, out


def test_two_workers_share_the_queue_and_halve_the_time(ray_session):
    one, out1 = _timed(1)
    two, out2 = _timed(2)
    assert [v for v, _ in out1] == [v for v, _ in out2] == [i * i for i in range(8)]  # item order
    assert len({pid for _, pid in out2}) == 2  # both workers took items
    assert one >= 4.0 and two < 0.7 * one, (one, two)


def test_a_closed_pool_refuses_work(ray_session):
    pool = ActorPool(Waiter, (0.0,), [{"num_cpus": 0.5}])
    pool.close()
    with pytest.raises(PoolError, match="closed"):
        pool.map([1], lambda w, i: w.work.remote(i))
