"""The Ray probe pool: same results as the plain loop, and a worker killed mid-batch loses nothing.

One Ray session for the module (about 5-10 s to start on 2 cores).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace

import pytest

from librarian.cluster import ProbeError, ProbePool, init_ray
from librarian.cluster.probe_pool import ProbeConfig
from librarian.config import ConfigError
from librarian.datasets import to_documents
from librarian.datasets.kbgym.build import build_kbgym
from librarian.rewards.probe_exam import ReaderSpec, run_local, snapshot_bytes, snapshot_key
from librarian.workspace import Document, Workspace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_session():
    import ray

    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # socket paths must stay under 107 bytes
    init_ray(num_cpus=2, temp_dir=tmp)
    yield ray
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def setup():
    kb = build_kbgym(people=80, seed=3)
    ws = Workspace.from_documents([replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)],
                                  raw_policy="editable")
    questions = kb.bundle.split("test_in")[::2]
    return ws, questions, run_local(ws, questions, ReaderSpec(), repeats=2)


def test_the_pool_agrees_with_the_plain_loop(ray_session, setup) -> None:
    ws, questions, reference = setup
    with ProbePool(ReaderSpec(), workers=2, chunk=7) as pool:
        pids = pool.ready()
        assert len(set(pids)) == 2 and os.getpid() not in pids  # two separate worker processes
        assert pool.run(ws, questions, repeats=2) == reference
        assert pool.run(ws, questions, repeats=2) == reference  # cached snapshot, same answers
        assert pool.failures == 0


def test_many_snapshots_in_one_map_agree_with_one_plain_loop_each(ray_session, setup) -> None:
    """A step's snapshots go through one map (`run_many`); each gets what the plain loop gives it."""
    ws, questions, reference = setup
    small = Workspace.from_documents([Document(n.id, n.text, path=n.path) for n in ws if n.kind == "raw"][:20],
                                     raw_policy="editable")
    with ProbePool(ReaderSpec(), workers=2, chunk=7) as pool:
        got = pool.run_many([(snapshot_key(snapshot_bytes(ws)), snapshot_bytes(ws), questions),
                             (snapshot_key(snapshot_bytes(small)), snapshot_bytes(small), questions[:3])], repeats=2)
    assert got == [reference, run_local(small, questions[:3], ReaderSpec(), repeats=2)]


def test_a_worker_killed_mid_batch_is_replaced_and_nothing_is_lost_or_doubled(ray_session, setup) -> None:
    ws, questions, reference = setup
    seen: list[int] = []
    with ProbePool(ReaderSpec(), workers=2, chunk=5, inflight=2) as pool:
        pool.ready()
        victim = pool.workers[0]

        def progress(done: int, total: int) -> None:
            seen.append(done)
            if len(seen) == 1:  # after the first chunk, while others are queued or in flight
                ray_session.kill(victim, no_restart=True)

        got = pool.run(ws, questions, repeats=2, progress=progress)
        assert pool.failures >= 1 and pool.replaced >= 1 and pool.workers[0] is not victim
        assert got == reference  # every (question, repeat) exactly once, in order
        assert seen[-1] == len(reference) and seen == sorted(seen)
        assert len({(r.qid, r.repeat) for r in got}) == len(got)


def test_more_deaths_than_max_restarts_fail_the_batch_with_a_clear_error(ray_session, setup) -> None:
    ws, questions, _ = setup
    with ProbePool(ReaderSpec(), workers=1, chunk=5, max_restarts=0) as pool:
        pool.ready()
        victim = pool.workers[0]

        def progress(done: int, total: int) -> None:
            ray_session.kill(victim, no_restart=True)

        with pytest.raises(ProbeError, match=r"probe workers failed 1 times \(limit 0\)"):
            pool.run(ws, questions, progress=progress)


def test_pool_arguments_are_checked(ray_session) -> None:
    with pytest.raises(ProbeError, match="workers, chunk and inflight"):
        ProbePool(ReaderSpec(), workers=0)
    with pytest.raises(ProbeError, match="gpus_per_worker"):
        ProbePool(ReaderSpec(), workers=1, gpus_per_worker=-1)
    with pytest.raises(ConfigError, match="probe.chunk"):
        ProbeConfig(chunk=0)


def test_a_probe_section_is_the_workers_reader_spec(ray_session, setup) -> None:
    """`ProbePool.of(section)`: the section's reader fields reach the workers (a smaller budget, other answers)."""
    ws, questions, _ = setup
    section = ProbeConfig(budget=1, workers=1, chunk=4)
    with ProbePool.of(section) as pool:
        assert pool.chunk == 4 and len(pool.workers) == 1
        got = pool.run(ws, questions)
    assert got == run_local(ws, questions, ReaderSpec(budget=1))
    assert all(r.actions <= 1 for r in got) and got != run_local(ws, questions, ReaderSpec())


def test_gpus_per_worker_reaches_ray(ray_session) -> None:
    """On a cluster without GPUs a probe worker that needs one stays pending: the request reached Ray."""
    from ray.exceptions import GetTimeoutError

    pool = ProbePool(ReaderSpec(), workers=1, gpus_per_worker=1)
    try:
        with pytest.raises(GetTimeoutError):
            ray_session.get(pool.workers[0].pid.remote(), timeout=3)
    finally:
        pool.close()
