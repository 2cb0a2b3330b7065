"""The colocated layout (`rollout.colocate`): a learner rank and a vLLM engine time-share one GPU.

On CPU, what can be checked without a GPU: `plan` places the one-GPU preset's pair in one bundle on one GPU of a
one-GPU cluster file and budgets both phases (the engine's share next to the learner's resident memory while it
samples, the learner's peak next to a sleeping engine while it updates), refusing when either is over; the config
check refuses the settings a shared GPU cannot run; Ray's placement group holds one bundle per pair, each member
asking for half its GPU; CUDA IPC publishing hands the learner's own tensors (no CPU copy) to the IPC path;
and, on a real local Ray with `hf` rollout workers, the session puts the engines to sleep before the learner's
step and wakes them before the publish, while a worker refuses any job or weight load that reaches it asleep.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob
from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.cluster.learner_actor import LearnerActor
from librarian.cluster.learner_start import reserve_learners
from librarian.cluster.topology import RayConfig, Resources, Topology
from librarian.cluster.waits import CallTimeoutError
from librarian.config import ConfigError, load_config
from librarian.learner import LearnerConfig, LoraConfig
from librarian.learner.logprobs import hf_model
from librarian.learner.weights import device_state
from librarian.models.base import BackendError
from librarian.models.vllm_backend import VLLMBackend
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.plan_command import load_job
from librarian.planning.cluster_file import load_cluster
from librarian.planning.job_plan import place_job
from librarian.rewards.construction import RewardConfig
from librarian.rl.session import RLSession
from librarian.workspace import Document
from tests.learner.conftest import random_samples

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parents[2]
ONE_GPU = [str(ROOT / "configs/train_builder.yaml"), str(ROOT / "configs/one_gpu.yaml")]


@pytest.fixture(scope="module")
def one_gpu_cluster(tmp_path_factory) -> Path:
    """The shipped launcher file cut down to a head and one node type with one L40S and the rollout image."""
    doc = yaml.safe_load((ROOT / "infra/ray/cluster.yaml").read_text())
    types = doc["available_node_types"]
    gpu = dict(types["learner"], resources={"CPU": 8, "GPU": 1}, max_workers=1,
               docker={"worker_image": types["rollout"]["docker"]["worker_image"]})
    doc["available_node_types"] = {"head": types["head"], "gpu": gpu}
    doc["max_workers"] = 1
    out = tmp_path_factory.mktemp("cluster") / "one_gpu.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def planned(cluster: Path, *overrides: str, files=ONE_GPU):
    return place_job(load_job(files, list(overrides)).config, load_cluster(cluster))


# --- plan: placement and budget ------------------------------------------------------------------------------
def test_the_one_gpu_preset_puts_the_pair_on_one_gpu_and_fits(one_gpu_cluster):
    report = planned(one_gpu_cluster, "out_dir=/shared/runs/x")
    assert report.ok, report.problems
    assert report.nodes == {"head": 1, "gpu": 1} and (report.used_gpus, report.idle_gpus) == (1, 0)
    lines = {line.split()[0] + " " + line.split()[1]: line for line in report.lines if "->" in line}
    assert lines["learner rank"].endswith("-> gpu#1 GPU 0") and lines["rollout worker"].endswith("-> gpu#1 GPU 0")
    assert "0.5 GPU" in lines["learner rank"] and "0.5 GPU" in lines["rollout worker"]
    shared = report.memory["colocated@gpu"]
    learner, engine = report.memory["learner@gpu"], report.memory["rollout@gpu"]
    assert shared["sampling"] == pytest.approx(learner["resident"] + engine["budget"])
    assert shared["updating"] > learner["total"] and shared["gpu_gib"] == pytest.approx(46068 / 1024)


def test_a_shared_gpu_over_its_memory_is_refused_naming_both_phases_and_a_share_that_fits(one_gpu_cluster):
    report = planned(one_gpu_cluster, "rollout.options.engine_kwargs.gpu_memory_utilization=0.97")
    found = [p for p in report.problems if p.startswith("learner rank 0 on gpu#1 GPU 0")]
    assert found and "while the engine samples" in found[0] and "while the learner updates" in found[0]
    fix = found[0].split("rollout.options.engine_kwargs.gpu_memory_utilization=")[1].split()[0]
    assert float(fix) < 0.97
    assert planned(one_gpu_cluster, f"rollout.options.engine_kwargs.gpu_memory_utilization={fix}").ok


def test_a_learner_and_an_engine_on_one_gpu_without_colocate_is_a_problem(one_gpu_cluster):
    report = planned(one_gpu_cluster, "rollout.colocate=false", "ray.learner_gpus=0.5", "rollout.gpus_per_worker=0.5")
    assert any("a learner rank and a vLLM engine share one GPU; set rollout.colocate=true" in p
               for p in report.problems), report.problems


# --- the config check --------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, expect", [
    (["rollout.workers=2"], r"rollout.workers \(2\) must equal learner.workers \(1\)"),
    (["ray.learner_gpus=2", "rollout.gpus_per_worker=2",
      "rollout.options.engine_kwargs.tensor_parallel_size=2"], "must both be 1"),
    (["ray.placement_group=false"], "needs ray.placement_group=true"),
    (["rollout.asynchronous=true"], "exclude each other"),
    (["rollout.sleep_level=2"], "sleep_level=2 drops the engine's base weights"),
    (["rollout.sleep_level=3"], "sleep_level must be 1"),
    (["rollout.options.engine_kwargs.enable_sleep_mode=false"], "enable_sleep_mode=true"),
    (["learner.lora.enabled=false", "rollout.options.weight_transfer=nccl"], "NCCL refuses two ranks"),
    (["rollout.colocate=false", "learner.lora.enabled=false", "rollout.options.weight_transfer=ipc"],
     "set rollout.colocate=true"),
    (["learner.workers=2", "rollout.workers=2", "learner.lora.enabled=false", "rollout.options.weight_transfer=ipc"],
     "publishes learner rank 0's GPU tensors"),
])
def test_what_a_shared_gpu_cannot_run_is_refused_when_the_config_loads(overrides, expect):
    with pytest.raises(ConfigError, match=expect):
        load_config(TrainBuilderConfig, [f"config={f}" for f in ONE_GPU] + overrides)


def test_the_one_gpu_preset_loads_and_names_only_real_engine_options():
    cfg = load_config(TrainBuilderConfig, [f"config={f}" for f in ONE_GPU])
    accepted = set(inspect.signature(VLLMBackend.__init__).parameters) - {"self"}
    assert set(cfg.rollout.options) <= accepted, set(cfg.rollout.options) - accepted
    assert cfg.rollout.colocate and cfg.rollout.options["engine_kwargs"]["enable_sleep_mode"] is True
    assert (cfg.ray.learner_gpus, cfg.rollout.gpus_per_worker, cfg.learner.device) == (1, 1, "cuda")


def test_full_weights_by_ipc_and_sleep_level_2_load():
    cfg = load_config(TrainBuilderConfig, [f"config={f}" for f in ONE_GPU] + [
        "learner.lora.enabled=false", "rollout.options.weight_transfer=ipc", "rollout.sleep_level=2"])
    assert cfg.rollout.colocate and cfg.rollout.sleep_level == 2


# --- placement groups and IPC --------------------------------------------------------------------------------
def test_a_colocated_topology_holds_one_bundle_per_pair_each_member_asking_half_its_gpu():
    topo = Topology(RayConfig(learner_cpus=2, learner_gpus=1), Resources(1, 1), 2, colocate=True)
    assert topo.bundles() == [{"CPU": 3.0, "GPU": 1.0}] * 2
    assert [o["num_gpus"] for o in topo.rollout_options()] == [0.5, 0.5]
    ranks = reserve_learners(topo, 2)  # no group re-reserved: rank i takes bundle i
    assert [o["num_gpus"] for o in ranks] == [0.5, 0.5] and ranks[1]["num_cpus"] == 2
    plain = Topology(RayConfig(learner_cpus=2, learner_gpus=1), Resources(1, 1), 2)
    assert plain.bundles() == [{"CPU": 2.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]


def test_ipc_publishing_hands_the_learners_own_tensors_not_cpu_copies():
    import torch

    actor = LearnerActor("hf", {"model": "tiny"}, LearnerConfig(lora=LoraConfig(enabled=False)))
    params = dict(hf_model(actor.learner.engine.module).named_parameters())
    state = device_state(actor.learner)
    assert state.keys() == params.keys()
    assert all(state[k].data_ptr() == params[k].data_ptr() for k in params)  # the same storage: no copy at all
    copies = actor.learner.engine.trainable_state()  # what the object-store and file paths publish
    assert all(copies[k].data_ptr() != params[k].data_ptr() and torch.equal(copies[k], params[k]) for k in params)
    with pytest.raises(BackendError, match="CUDA IPC weight sync needs GPU tensors; .* is on cpu"):
        actor.publish("ipc")  # a CPU learner has no GPU tensors to hand over


# --- the session's sleep / wake order, on a real local Ray ---------------------------------------------------
class WatchedWorker:
    """Mixed into `BuilderRolloutWorker` below: reports whether its engine sleeps and how often it woke."""

    def state(self) -> tuple[bool, int, int]:
        return self.asleep, self.wakes, self.version


@pytest.fixture(scope="module")
def session():
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    worker = type("Watched", (WatchedWorker, BuilderRolloutWorker), {})
    ray.init(num_cpus=3, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    rollout = BuilderRolloutConfig(options={"model": "tiny"}, workers=1, cpus_per_worker=0.5, budget=2,
                                   max_new_tokens=8, torch_threads=1, constrained=False, content_executor="none",
                                   colocate=True)
    s = RLSession(RayConfig(learner_cpus=0.5), rollout, LearnerConfig(lr=1e-2), worker, (rollout, RewardConfig()))
    yield s
    s.close()
    ray.shutdown()


def _state(s) -> tuple[bool, int, int]:
    import ray

    return ray.get(s.rollouts.workers[0].state.remote())


def _job(s, name: str):
    docs = [Document(f"d{i}", f"Person {i} lives in town {i}.", path=f"d{i}.md") for i in range(2)]
    return BuildJob(name, "c", docs, group_size=1, seed=0, min_version=s.version)


def test_engines_sleep_before_the_step_and_wake_before_the_publish(session):
    s = session
    assert s.colocated and s.topo.bundles() == [{"CPU": 1.0}]  # one bundle: the learner and worker 0
    assert s.publish() == 0
    assert _state(s) == (False, 0, -1)  # (asleep, wakes, weights version: loaded lazily, with a job)
    s.step(random_samples(4, seed=0))
    assert s.asleep and _state(s) == (True, 0, -1)  # asleep while the learner stepped
    with pytest.raises(Exception, match="reached a sleeping rollout engine"):
        s.rollouts.run([_job(s, "early")], s.sync.box)  # nothing samples from a sleeping engine
    assert s.publish() == 1
    assert not s.asleep and _state(s) == (False, 1, -1)  # awake; loads the new adapter with its next job
    records = s.rollouts.run([_job(s, "after")], s.sync.box)["after"]
    assert [r.policy_version for r in records] == [1] and _state(s) == (False, 1, 1)


def test_a_learner_call_past_its_limit_names_the_call_the_actor_and_the_key(session):
    s = session
    limit = s.learner_cfg.call_timeout_s
    s.learner_cfg.call_timeout_s = 0.01  # a real step on the tiny model takes far longer
    try:
        with pytest.raises(CallTimeoutError, match=r"learner call step\(\) on LearnerActor [0-9a-f]{8} did not finish "
                                                    r"within 0.01 s; raise learner.call_timeout_s"):
            s.step(random_samples(4, seed=1))
    finally:
        s.learner_cfg.call_timeout_s = limit
    assert s.publish() >= 1 and _state(s)[0] is False  # the run can go on (or save and stop) after the error
