"""Rollout workers on a real local Ray session: weight sync, versions, and workers that die mid-batch.

One pool (two tiny-model workers) serves the module; its crash plan names
the jobs that die (`x*`: the process exits) or hang until `ray.kill` (`h*`).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob
from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.cluster.faults import CrashPlan
from librarian.cluster.rollout_pool import RolloutPool
from librarian.cluster.topology import RayConfig, Resources, Topology, TopologyError
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.learner import Learner, LearnerConfig, LearnerError, LoraConfig
from librarian.learner.weights import WeightsPayload
from librarian.models.hf import tiny_llama
from librarian.pipelines.builder.corpora import make_corpora
from librarian.rewards.construction import RewardConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
MARKERS = Path(tempfile.mkdtemp(prefix="crash"))


RAY_CPUS = 4  # the `ray_session` fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def corpus():
    kb = build_kbgym(people=60, seed=1, sizes=SplitSizes(train=30, test_in=20, test_out=10, eval_in=5, eval_out=5))
    return make_corpora(kb, 1, questions=2, docs=8, splits=("train",), seed=1, prefix="c")[0]


@pytest.fixture(scope="module")
def pool(ray_session):
    plan = CrashPlan(jobs=["x1"], hang_jobs=["h0"], marker_dir=str(MARKERS), after_episodes=2)
    spec = BuilderRolloutConfig(options={"model": "tiny"}, budget=2, max_new_tokens=8, torch_threads=1, crash=plan,
                                constrained=False, content_executor="none")
    p = RolloutPool(BuilderRolloutWorker, (spec, RewardConfig(every=1, max_probes=2)), [{"num_cpus": 0.5}] * 2,
                    max_restarts=4)
    p.ready()
    yield p
    p.close()


def _jobs(corpus, names, version=-1):
    return [BuildJob(n, corpus.corpus_id, corpus.docs, 2, seed=10 + i, min_version=version)
            for i, n in enumerate(names)]


def _texts(batch):
    return {j: [[t.text for t in r.trajectory.turns] for r in recs] for j, recs in batch.items()}


def _payload(version):
    """A LoRA payload for the same tiny base model, its adapter moved away from the identity."""
    backend = tiny_llama(seed=0)
    learner = Learner(backend.model, LearnerConfig(lora=LoraConfig(rank=4, alpha=8)), pad_id=backend.pad_id)
    _, payload = learner.publish_weights()
    return WeightsPayload(version, payload.kind, {k: v + 0.05 for k, v in payload.state.items()}, payload.lora)


@pytest.mark.slow
def test_weight_sync_changes_the_policy_and_never_goes_back(ray_session, pool, corpus):
    ray = ray_session
    before = pool.run(_jobs(corpus, ["a0"]))
    assert before["a0"][0].policy_version == -1
    after = pool.run(_jobs(corpus, ["a0"], version=1), [ray.put(_payload(1))])
    assert after["a0"][0].policy_version == 1
    assert _texts(after) != _texts(before)  # same seed, new weights: a different policy
    with pytest.raises(LearnerError, match="refusing weights version 0"):
        ray.get(pool.workers[0].load.remote(_payload(0)))


@pytest.mark.slow
def test_injected_crash_mid_batch_is_redone_exactly_once(ray_session, pool, corpus):
    box = [ray_session.put(_payload(2))]  # every worker (the restarted one too) builds with version 2
    batch = pool.run(_jobs(corpus, ["x0", "x1", "x2"], version=2), box)
    assert pool.failures == 1 and (MARKERS / "crashed-x1").is_file()
    assert sorted(batch) == ["x0", "x1", "x2"]
    assert all([r.index for r in recs] == [0, 1] for recs in batch.values())  # none lost, none twice
    crashed_pid = int((MARKERS / "crashed-x1").read_text())
    assert all(r.worker_pid != crashed_pid for r in batch["x1"])
    assert all(r.policy_version == 2 for recs in batch.values() for r in recs)
    rerun = pool.run(_jobs(corpus, ["x0", "x1", "x2"], version=2), box)
    assert _texts(rerun) == _texts(batch)  # a clean rerun: the redone job is the same work


@pytest.mark.slow
def test_ray_kill_mid_batch_restarts_the_worker_and_reloads_weights(ray_session, pool, corpus):
    ray = ray_session
    box = [ray.put(_payload(3))]
    failures = pool.failures
    thread = threading.Thread(target=_kill_hung, args=(ray, pool, MARKERS / "crashed-h0"))
    thread.start()
    batch = pool.run(_jobs(corpus, ["h0", "h1"], version=3), box)
    thread.join()
    assert pool.failures == failures + 1 and pool.replaced == 0  # restarted by Ray, not replaced
    assert sorted(batch) == ["h0", "h1"]
    assert all(r.policy_version == 3 for recs in batch.values() for r in recs)  # reloaded after the restart
    assert pool.versions() == [3, 3]


def _kill_hung(ray, pool, marker: Path) -> None:
    """Once job h0 hangs, `ray.kill` (restart allowed) the worker that does not answer (it is busy in h0)."""
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    refs = [w.pid.remote() for w in pool.workers]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=3.0)
    hung = [w for w, r in zip(pool.workers, refs, strict=True) if r not in ready]
    assert len(hung) == 1, f"expected one hung worker, found {len(hung)}"
    ray.kill(hung[0], no_restart=False)


def test_placement_group_holds_learner_and_rollout_bundles(ray_session):
    topo = Topology(RayConfig(learner_cpus=0.25, strategy="PACK"), Resources(0.25), workers=2)
    assert topo.bundles() == [{"CPU": 0.25}] * 3
    topo.reserve(timeout_s=60)
    opts = topo.rollout_options()
    assert [o["scheduling_strategy"].placement_group_bundle_index for o in opts] == [1, 2]
    assert topo.learner_options()["num_cpus"] == 0.25
    topo.release()
    with pytest.raises(TopologyError, match="ray.strategy"):
        Topology(RayConfig(strategy="ROUND_ROBIN"), Resources(1), 1)
    with pytest.raises(TopologyError, match="rollout.workers"):
        Topology(RayConfig(), Resources(1), 0)
