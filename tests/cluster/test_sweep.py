"""What `librarian.cluster.tune_sweep` adds to Ray Tune, on a real local Ray with trivial trainables: child
actors inside a trial's placement group, per-step reports through the tracking layer's listeners, the
attempt log with retries and timeouts; and the pure parts (placement groups, peaks, the log reader).

Trainables are closures made inside the tests, so Ray pickles them by value.
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.cluster import tune_sweep as ts
from librarian.tracking import Tracker, metric_history, step_listeners

os.environ.setdefault("RAY_AUTH_MODE", "disabled")


# --- step listeners (the tracking layer's hook) ---------------------------------------------------------------
def test_listeners_get_each_logged_step_until_unregistered(tmp_path):
    seen: list = []
    tracker = Tracker("listen", tmp_path)
    with step_listeners.listening(lambda m, s: seen.append((m, s))):
        tracker.log_metrics({"reward": 0.5, "note": "text", "nan": float("nan"), "n": 3}, step=2)
    tracker.log_metrics({"reward": 0.7}, step=3)  # no listener any more
    assert seen == [({"reward": 0.5, "n": 3.0}, 2)]  # what MLflow got: finite numbers only
    assert metric_history(tracker, tracker.run_id, "reward") == [(2, 0.5), (3, 0.7)]
    tracker.finish()


def test_listener_errors_reach_the_caller_and_bad_listeners_are_refused():
    def boom(metrics, step):
        raise RuntimeError(f"stop at {step}")

    with step_listeners.listening(boom), pytest.raises(RuntimeError, match="stop at 4"):
        step_listeners.notify({"x": 1.0}, 4)
    step_listeners.notify({"x": 1.0}, 5)  # unregistered on leaving the block
    with pytest.raises(TypeError, match="must be callable"):
        step_listeners.register("not a function")  # type: ignore[arg-type]
    step_listeners.unregister(boom)  # absent: nothing happens


# --- placement groups -----------------------------------------------------------------------------------------
def test_placement_group_has_an_empty_head_and_the_actor_bundles():
    pgf = ts.placement([{"CPU": 0.5}, {"CPU": 1, "GPU": 0}, {"CPU": 0}], "SPREAD")
    assert pgf.head_bundle_is_empty and pgf.bundles == [{"CPU": 0.5}, {"CPU": 1.0}]
    assert pgf.strategy == "SPREAD" and pgf.required_resources == {"CPU": 1.5}
    held = ts.placement([{"CPU": 1}], head={"learner_node": 1})
    assert not held.head_bundle_is_empty and held.bundles[0] == {"learner_node": 1.0}


@pytest.mark.slow
def test_trials_actors_run_inside_the_trials_placement_group(ray_session, tmp_path):
    from ray import tune

    def trainable(config):
        import ray
        from ray.util import get_current_placement_group

        @ray.remote(num_cpus=1)
        class Child:
            def group(self):
                g = get_current_placement_group()
                return g.id.hex() if g else ""

        mine = get_current_placement_group()
        child = Child.remote()
        time.sleep(1.0)
        return {"trial_pg": mine.id.hex() if mine else "", "child_pg": ray.get(child.group.remote()),
                "start": time.time()}

    log = ts.AttemptLog(tmp_path / "attempts.jsonl", lambda t: t.config["i"], retries=0)
    tuner = tune.Tuner(tune.with_resources(trainable, ts.placement([{"CPU": 1}])),
                       param_space={"i": tune.grid_search([0, 1, 2])},
                       run_config=tune.RunConfig(name="pg", storage_path=str(tmp_path), callbacks=[log], verbose=0))
    results = list(tuner.fit())
    assert all(r.error is None for r in results)
    for r in results:
        assert r.metrics["trial_pg"] and r.metrics["child_pg"] == r.metrics["trial_pg"]
    ends = [a for a in ts.read_attempts(tmp_path / "attempts.jsonl") if a["event"] == "end"]
    spans = [ts.Span(str(a["cell"]), 1, a["start"], a["end"]) for a in ends]
    assert len(spans) == 3 and ts.peak_concurrency(spans) <= 2  # one CPU bundle each on 2 CPUs: one queued


# --- the attempt log: retries, failures, timeouts -------------------------------------------------------------
@pytest.mark.slow
def test_attempt_log_records_retries_failures_and_timeouts(ray_session, tmp_path):
    from ray import tune

    marker = str(tmp_path / "flaky")

    def trainable(config):
        kind = config["kind"]
        if kind == "flaky" and not os.path.exists(marker):
            open(marker, "w").close()  # noqa: SIM115 - a marker, nothing to write
            raise RuntimeError("first attempt fails")
        if kind == "broken":
            raise ValueError("boom")
        if kind == "crash":
            os._exit(3)  # the trial's process dies: no exception reaches Ray
        if kind == "slow":
            time.sleep(120)
        return {"ok": 1, ts.DONE_KEY: True}

    log = ts.AttemptLog(tmp_path / "attempts.jsonl", lambda t: t.config["kind"], retries=1, timeout_s=6.0)
    tuner = tune.Tuner(tune.with_resources(trainable, ts.placement([{"CPU": 1}])),
                       param_space={"kind": tune.grid_search(["ok", "flaky", "broken", "crash", "slow"])},
                       run_config=tune.RunConfig(name="att", storage_path=str(tmp_path), callbacks=[log], verbose=0,
                                                 failure_config=tune.FailureConfig(max_failures=0)))
    started = time.time()
    by = {r.config["kind"]: r for r in tuner.fit()}
    ends: dict[str, list] = {}
    for a in ts.read_attempts(tmp_path / "attempts.jsonl"):
        if a["event"] == "end":
            ends.setdefault(a["cell"], []).append((a["attempt"], a["status"], a["error"]))
    assert ends["ok"] == [(1, "finished", "")]
    assert ends["flaky"] == [(1, "retry", "RuntimeError: first attempt fails"), (2, "finished", "")]
    assert ends["broken"] == [(1, "retry", "ValueError: boom"), (2, "failed", "ValueError: boom")]
    assert [s for _, s, _ in ends["crash"]] == ["retry", "failed"] and "worker died" in ends["crash"][-1][2]
    assert ends["slow"] == [(1, "retry", "timed out after 6 s"), (2, "failed", "timed out after 6 s")]
    assert by["flaky"].error is None and by["broken"].error is not None and by["slow"].error is not None
    assert time.time() - started < 100  # the slow trial was ended, not waited for (120 s per attempt)


def test_describe_names_the_cause():
    import ray.exceptions as rex

    assert ts.describe(ValueError("bad\nvalue: 3")) == "ValueError: value: 3"
    assert ts.describe(rex.RayTaskError("f", "tb", ValueError("boom"))) == "ValueError: boom"
    assert ts.describe(None) == "unknown error"


def test_read_attempts_skips_a_torn_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"cell": "a", "event": "start"}\n{"cell": "b", "ev')
    assert ts.read_attempts(path) == [{"cell": "a", "event": "start"}]
    assert ts.read_attempts(tmp_path / "missing.jsonl") == []


spans = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 50)), max_size=12).map(
    lambda xs: [ts.Span(f"c{i}", 1, s, s + d) for i, (s, d) in enumerate(xs)])


@settings(max_examples=200, deadline=None)
@given(spans)
def test_peak_concurrency_matches_brute_force(items):
    peak = ts.peak_concurrency(items)
    points = [s.start for s in items]
    brute = max((sum(1 for s in items if s.start <= t < s.end) for t in points), default=0)
    assert peak == brute  # half-open spans: one ending as another starts is not an overlap
    assert 0 <= peak <= len(items)


def test_peak_concurrency_counts_touching_spans_once():
    assert ts.peak_concurrency([ts.Span("a", 1, 0, 1), ts.Span("b", 1, 1, 2)]) == 1
    assert ts.peak_concurrency([ts.Span("a", 1, 0, 2), ts.Span("b", 1, 1, 3), ts.Span("c", 1, 1.5, 1.6)]) == 3
    assert ts.peak_concurrency([]) == 0
