"""The sweep scheduler on a real local Ray runtime with trivial cells, and its pure parts (admission, peaks).

Cells are closures made inside the tests, so Ray pickles them by value (the
test module need not be importable in the workers).
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.cluster.sweep import Footprint, Job, Scheduler, Span, SweepError, fits, peak_concurrency

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def sleeper(seconds: float):
    def cell() -> float:
        time.sleep(seconds)
        return seconds

    return cell


def flaky(marker: str):
    def cell() -> str:
        if not os.path.exists(marker):
            open(marker, "w").close()  # noqa: SIM115 - a marker, nothing to write
            raise RuntimeError("first attempt fails")
        return "second attempt"

    return cell


def broken():
    def cell() -> None:
        raise ValueError("boom")

    return cell


def crasher():
    def cell() -> None:
        os._exit(3)  # the worker process dies: no exception ever reaches Ray

    return cell


@pytest.mark.slow
def test_cells_share_the_cluster_and_failures_do_not_stop_the_sweep(ray_session, tmp_path):
    cpu = Footprint(cpus=1, hold=True)
    jobs = [Job("a", sleeper(1.0), footprint=cpu), Job("b", sleeper(1.0), footprint=cpu),
            Job("c", sleeper(1.0), footprint=cpu),
            Job("flaky", flaky(str(tmp_path / "marker")), footprint=cpu, retries=1),
            Job("broken", broken(), footprint=cpu, retries=1),
            Job("crash", crasher(), footprint=cpu, retries=0)]
    done, started = [], []
    sched = Scheduler()
    assert sched.cap["CPU"] == 2.0
    outcomes = sched.run(jobs, on_start=lambda j, a: started.append((j.name, a)), on_done=done.append)
    by = {o.name: o for o in outcomes}
    assert [o.name for o in outcomes] == [j.name for j in jobs]
    assert sorted(o.name for o in done) == sorted(by)  # on_done once per cell, when it is final
    for name in "abc":
        assert by[name].status == "finished" and by[name].value == 1.0 and by[name].attempts == 1
    assert by["flaky"].status == "finished" and by["flaky"].attempts == 2 and by["flaky"].value == "second attempt"
    assert "first attempt fails" in by["flaky"].errors[0]
    assert by["broken"].status == "failed" and by["broken"].attempts == 2 and len(by["broken"].errors) == 2
    assert "ValueError: boom" in by["broken"].error
    assert by["crash"].status == "failed" and by["crash"].attempts == 1 and "worker died" in by["crash"].error
    assert ("flaky", 2) in started and ("broken", 2) in started and ("crash", 2) not in started
    assert peak_concurrency(sched.spans) == 2  # two 1-CPU cells at a time on 2 CPUs; the rest queued


def test_max_concurrent_limits_and_queues(ray_session):
    jobs = [Job(f"j{i}", sleeper(0.5), footprint=Footprint(cpus=0.1)) for i in range(3)]
    sched = Scheduler(max_concurrent=1)
    outcomes = sched.run(jobs)
    assert all(o.status == "finished" for o in outcomes)
    assert peak_concurrency(sched.spans) == 1
    spans = sorted(sched.spans, key=lambda s: s.start)
    assert all(x.end <= y.start for x, y in zip(spans, spans[1:], strict=False))


def test_custom_resources_gate_admission(ray_session):
    # hold=False: the footprint only gates admission (the cell's own actors would reserve it)
    slot = Footprint(cpus=0.5, custom={"learner_slot": 1})
    sched = Scheduler(cap={"CPU": 2.0, "learner_slot": 1.0})
    outcomes = sched.run([Job("x", sleeper(0.5), footprint=slot), Job("y", sleeper(0.5), footprint=slot)])
    assert [o.status for o in outcomes] == ["finished", "finished"]
    assert peak_concurrency(sched.spans) == 1


def test_timeout_fails_the_cell(ray_session):
    sched = Scheduler()
    [o] = sched.run([Job("slow", sleeper(60), footprint=Footprint(cpus=1), timeout_s=1.0)])
    assert o.status == "failed" and "timed out after 1 s" in o.error and o.wall_s < 30


def test_bad_settings_are_named():
    with pytest.raises(SweepError, match="max_concurrent"):
        Scheduler(max_concurrent=-1, cap={"CPU": 1})
    with pytest.raises(SweepError, match="resources.cpus"):
        Footprint(cpus=-1).check("c")
    with pytest.raises(SweepError, match="unique"):
        Scheduler(cap={"CPU": 1}).run([Job("a", print), Job("a", print)])


def test_footprint_and_fits():
    fp = Footprint(cpus=2, gpus=1, custom={"rollout_node": 0.5})
    assert fp.as_dict() == {"CPU": 2.0, "GPU": 1.0, "rollout_node": 0.5}
    assert Footprint(cpus=1).as_dict() == {"CPU": 1.0}
    cap = {"CPU": 4.0, "GPU": 1.0, "rollout_node": 1.0}
    assert fits({}, fp.as_dict(), cap)
    assert not fits({"GPU": 0.5}, fp.as_dict(), cap)
    assert not fits({}, {"TPU": 1.0}, cap)  # a resource the cluster lacks never fits


spans = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50)), max_size=12).map(
    lambda xs: [Span(f"c{i}", 1, s, s + d) for i, (s, d) in enumerate(xs)])


@settings(max_examples=200, deadline=None)
@given(spans)
def test_peak_concurrency_matches_brute_force(items):
    peak = peak_concurrency(items)
    points = [s.start for s in items]
    brute = max((sum(1 for s in items if s.start <= t < s.end) for t in points), default=0)
    assert peak == brute  # half-open spans: one ending as another starts is not an overlap
    assert 0 <= peak <= len(items)


def test_peak_concurrency_counts_touching_spans_once():
    assert peak_concurrency([Span("a", 1, 0, 1), Span("b", 1, 1, 2)]) == 1
    assert peak_concurrency([Span("a", 1, 0, 2), Span("b", 1, 1, 3), Span("c", 1, 1.5, 1.6)]) == 3
    assert peak_concurrency([]) == 0

