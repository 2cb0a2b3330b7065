"""A sweep's trial asks Ray for what its cell's session asks for, and Tune queues trials against the live
cluster instead of a concurrency computed from the resources seen at start.

The first test runs on a local Ray that declares 4 GPUs (logical: Ray only counts them), so a cell's learner,
rollout and probe GPUs can be reserved on a CPU machine. The second runs a two-node Ray (`ray.cluster_utils`):
at the sweep's start the cluster holds no trial; a node added while Tune waits (as an autoscaler would add
one) runs both trials at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from librarian.cluster import ProbePool
from librarian.cluster import tune_sweep as ts
from librarian.cluster.learner_start import reserve_learners
from librarian.cluster.topology import Resources, Topology
from librarian.config import ConfigError, load_config
from librarian.pipelines.ablate import config as ac
from librarian.pipelines.ablate import search as srch
from librarian.pipelines.ablate.sweep import run
from librarian.pipelines.builder.config import TrainBuilderConfig

pytestmark = pytest.mark.slow
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
NAP = "tests.pipelines.test_sweep_resources:nap"
CELL = {"ray.learner_cpus": 1, "ray.learner_gpus": 1, "learner.workers": 2, "rollout.workers": 2,
        "rollout.cpus_per_worker": 0.5, "rollout.gpus_per_worker": 0.5, "probe.workers": 2,
        "probe.gpus_per_worker": 0.25}


@dataclass
class NapConfig:
    """A pipeline whose run only sleeps; `workers` one-CPU actors in its footprint (as `evaluate` has)."""

    out_dir: str = "build/nap"
    seed: int = 0
    workers: int = 0
    seconds: float = 1.0
    experiment: str = "nap"
    tracking_uri: str = ""


def nap(cfg: NapConfig) -> dict:
    time.sleep(cfg.seconds)
    return {"slept": cfg.seconds}


def bundle(options: dict) -> tuple:
    """An actor's Ray options as a hashable bundle (zero amounts left out, as in a placement group)."""
    amounts = {"CPU": float(options.get("num_cpus", 0) or 0), "GPU": float(options.get("num_gpus", 0) or 0)}
    return tuple(sorted((k, v) for k, v in amounts.items() if v))


def test_a_trial_asks_for_what_its_cells_session_reserves(tmp_path):
    import ray
    from ray.util.placement_group import placement_group_table

    sweep = ac.load(["pipeline=train_builder", f"base.config=[{ROOT / 'configs' / 'train_builder.yaml'}]",
                     "base.overrides=" + str(CELL).replace("'", "")])
    cell = ac.validate(sweep, ac.sweep_cells(sweep), tmp_path)[0]
    trial = Counter(tuple(sorted(b.items())) for b in ac.placement(sweep, cell).bundles)
    assert sum(n * dict(b).get("GPU", 0.0) for b, n in trial.items()) == 2 * 1 + 2 * 0.5 + 2 * 0.25

    base = [f"config={ROOT / 'configs' / 'train_builder.yaml'}", *ac.render(CELL)]
    ray.init(num_cpus=4, num_gpus=4, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    try:
        for overrides in (ac.trial_overrides(TrainBuilderConfig), {}):  # inside a trial (no group of its own), alone
            cfg = load_config(TrainBuilderConfig, base + ac.render(overrides))
            topo = Topology(cfg.ray, Resources(cfg.rollout.cpus_per_worker, cfg.rollout.gpus_per_worker),
                            cfg.rollout.workers)
            topo.reserve()  # what RLSession does, in its order: the group, the learner ranks, the probe pool
            ranks = reserve_learners(topo, cfg.learner.workers)
            probes = ProbePool.of(cfg.probe)
            try:
                asked = [bundle(o) for o in probes.options]
                if topo.group is None:
                    asked += [bundle(o) for o in ranks + topo.rollout_options()]
                else:
                    asked += [tuple(sorted(b.items())) for b in placement_group_table(topo.group)["bundles"].values()]
                assert Counter(asked) == trial, overrides
            finally:
                probes.close()
                topo.release()
    finally:
        ray.shutdown()


def test_trials_queue_until_the_cluster_holds_them(tmp_path):
    from ray.cluster_utils import Cluster

    out = tmp_path / "sweep"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cmd = [sys.executable, "-m", "librarian.cli", "ablate", f"pipeline={NAP}", f"out_dir={out}",
               f"ray.address={cluster.address}", "base.overrides={workers: 2}", "grid={seconds: [4.0, 4.5]}",
               "n_boot=10", "max_concurrent=0"]
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
        sweep = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 240
        while not (out / "tune").exists() and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the sweep has read the cluster's resources and Tune is waiting on them
        time.sleep(2.0)
        assert sweep.poll() is None, sweep.communicate()[0][-3000:]  # a 1-CPU cluster did not make it refuse
        cluster.add_node(num_cpus=4)  # as an autoscaler would: a node that holds both 2-CPU trials
        log, _ = sweep.communicate(timeout=300)
    finally:
        cluster.shutdown()
    assert sweep.returncode == 0, log[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["capacity"]["CPU"] == 1.0  # what it saw at the start: no trial fit
    assert results["counts"]["finished"] == 2, results["cells"]
    assert results["peak_concurrent"] == 2, results["timeline"]  # both ran at once on the grown cluster


def test_tune_is_given_no_concurrency_limit_unless_the_sweep_sets_one():
    assert srch.tune_config(ac.load([f"pipeline={NAP}"])).max_concurrent_trials is None
    assert srch.tune_config(ac.load([f"pipeline={NAP}", "max_concurrent=3"])).max_concurrent_trials == 3


def test_a_ray_started_here_refuses_a_cell_it_can_never_hold(tmp_path):
    assert ts.unfit({"a": {"CPU": 2.0}, "b": {"CPU": 1.0, "GPU": 1.0}}, {"CPU": 2.0}) == [
        "cell 'b' needs {'CPU': 1.0, 'GPU': 1.0} but the Ray cluster has {'CPU': 2.0} (short of {'GPU': 1.0})"]
    with pytest.raises(ConfigError, match=r"cell 'base' needs .*short of \{'big': 1.0\}.*could never start on the Ray "
                                          "this command started"):
        run(ac.load([f"pipeline={NAP}", f"out_dir={tmp_path / 's'}", "ray.address=local",
                     "resources={custom: {big: 1}}"]))
