"""Full-weight broadcast sync over gloo: the same orchestration as NCCL to vLLM engines, on CPU.

Units (no Ray): a gloo sender and two receivers in threads move mixed-dtype
tensors over several buffers bit for bit; a tensor list that does not match
is refused on either end, naming the tensor. End to end (a real local Ray):
an `RLSession` with 2 `hf` rollout workers and `weight_transfer: broadcast`
joins the group at start; after one optimizer step and a publish every
worker's weights equal the learner's exactly, the object store holds only
the note, and a worker that dies mid-batch pulls the weights once, after
which the next publish rebuilds the group and broadcasts to all; so does a
publish that finds a worker Ray restarted before the pool noticed.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import threading
import time

import pytest
import torch  # noqa: TID253

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob
from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.cluster.faults import CrashPlan
from librarian.cluster.topology import RayConfig
from librarian.cluster.weight_sync import BroadcastSync
from librarian.cluster.weight_sync_config import (
    BroadcastNote,
    WeightSyncError,
    backend_options,
    broadcast_transport,
)
from librarian.learner import LearnerConfig, LoraConfig
from librarian.models.base import BackendError
from librarian.models.hf import tiny_llama
from librarian.models.weight_transfer.gloo import GlooReceiver, GlooWeightSender, check_fits
from librarian.models.weight_transfer.nccl import pack_plan, packed_buffers, weights_meta
from librarian.rewards.construction import RewardConfig
from librarian.rl.session import RLSession
from librarian.workspace import Document
from tests.learner.conftest import random_samples

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def _tensors() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [("a", torch.randn(7, 5, generator=g)), ("b", torch.randn(3, generator=g).to(torch.bfloat16)),
            ("c", torch.randint(-9, 9, (4, 2), generator=g)), ("d", torch.randn(2, 2, 3, generator=g))]


def test_gloo_sender_and_two_receivers_move_every_tensor_bit_for_bit():
    named = _tensors()
    meta = weights_meta(named)
    sender = GlooWeightSender([1, 1], buffer_bytes=64, timeout_s=60)
    assert len(pack_plan(meta, 64)) >= 3  # several buffers, and a bfloat16 tensor at an odd offset
    got: dict[int, dict] = {}
    errors: list[BaseException] = []

    def receive(i: int) -> None:
        try:
            receiver = GlooReceiver(sender.init_info(i))
            got[i] = {name: t.clone() for name, t in receiver.receive(meta)}
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=receive, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    sender.connect()
    sent = sender.send(iter(named), meta)
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sent == sum(t.numel() * t.element_size() for _, t in named)
    for i in range(2):
        assert list(got[i]) == [n for n, _ in named]
        for name, tensor in named:
            assert got[i][name].dtype == tensor.dtype and torch.equal(got[i][name], tensor)


def test_a_mismatched_tensor_list_is_refused_naming_the_tensor():
    named = _tensors()
    meta = weights_meta(named)
    wrong = [*meta[:2], ("c", "int64", [4, 3]), meta[3]]
    with pytest.raises(BackendError, match=r"weight 2: sending 'c' int64 \[4, 2\] but the receivers expect 'c' "
                                           r"int64 \[4, 3\]"):
        list(packed_buffers(iter(named), wrong, 1 << 20, "cpu"))
    with pytest.raises(BackendError, match="more weights to send than the 3 .*'d'"):
        list(packed_buffers(iter(named), meta[:3], 1 << 20, "cpu"))

    model = tiny_llama(seed=0).model
    good = weights_meta(model.named_parameters())
    check_fits(model, good)
    name = good[1][0]
    with pytest.raises(BackendError, match=f"{name!r} comes as \\[1, 2\\]"):
        check_fits(model, [*good[:1], (name, good[1][1], [1, 2]), *good[2:]])
    with pytest.raises(BackendError, match="sends 'model.not_there'"):
        check_fits(model, [*good, ("model.not_there", "float32", [1])])
    with pytest.raises(BackendError, match=f"not sent: \\[{good[-1][0]!r}\\]"):
        check_fits(model, good[:-1])


def test_broadcast_transport_per_backend_and_device():
    assert broadcast_transport("hf", {"weight_transfer": "broadcast"}, False, "cpu") == "gloo"
    assert broadcast_transport("vllm", {"weight_transfer": "nccl"}, False, "cuda") == "nccl"
    assert broadcast_transport("vllm", {"weight_transfer": "nccl"}, True, "cuda") == ""  # LoRA: adapters, object store
    assert broadcast_transport("vllm", {"weight_transfer": "file"}, False, "cuda") == ""
    with pytest.raises(WeightSyncError, match="needs the learner on a GPU"):
        broadcast_transport("vllm", {"weight_transfer": "nccl"}, False, "cpu")
    with pytest.raises(WeightSyncError, match="'nccl' does not broadcast to rollout backend 'hf'"):
        broadcast_transport("hf", {"weight_transfer": "nccl"}, False, "cpu")
    assert backend_options("hf", {"model": "tiny", "weight_transfer": "broadcast"}) == {"model": "tiny"}
    assert backend_options("vllm", {"weight_transfer": "nccl"}) == {"weight_transfer": "nccl"}


class WeighedWorker(BuilderRolloutWorker):
    """A builder rollout worker that also hands out its model's weights (for the comparison)."""

    def weights(self) -> dict:
        return {k: v.detach().clone() for k, v in self.backend.model.state_dict().items()}


@pytest.fixture(scope="module")
def session():
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need WeighedWorker, not this module
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    plan = CrashPlan(jobs=["x0"], marker_dir=tempfile.mkdtemp(prefix="crash"))
    rollout = BuilderRolloutConfig(options={"model": "tiny", "weight_transfer": "broadcast"}, workers=2,
                                   cpus_per_worker=0.5, budget=2, max_new_tokens=8, torch_threads=1, crash=plan,
                                   constrained=False, content_executor="none")
    learner = LearnerConfig(lr=1e-2, lora=LoraConfig(enabled=False))
    s = RLSession(RayConfig(learner_cpus=0.5), rollout, learner, WeighedWorker, (rollout, RewardConfig()))
    yield s
    s.close()
    ray.shutdown()


def _learner_weights(s) -> dict:
    import ray

    _, ref = ray.get(s.learner.publish.remote())  # for the comparison only: the run itself never does this
    return ray.get(ref).state


def _assert_workers_hold(s, version: int) -> None:
    import ray

    want = _learner_weights(s)
    assert s.rollouts.versions() == [version, version]
    for w in s.rollouts.workers:
        got = ray.get(w.weights.remote())
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), "a worker's weights differ from the learner's"


def test_one_step_then_publish_gives_every_worker_the_learners_weights(session):
    import ray

    s = session
    assert isinstance(s.sync, BroadcastSync) and s.sync.transport == "gloo"
    before = ray.get(s.rollouts.workers[0].weights.remote())
    s.step(random_samples(4, seed=0))
    assert s.publish() == 1 and s.version == 1
    _assert_workers_hold(s, 1)
    after = ray.get(s.rollouts.workers[0].weights.remote())
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the step moved them
    note = ray.get(s.sync.box[0])  # the object store holds the note, not the weights
    assert isinstance(note, BroadcastNote) and note.version == 1 and set(note.update_info) == {
        "names", "dtype_names", "shapes"}

    bad = dict(note.update_info, shapes=[[1, 1], *note.update_info["shapes"][1:]])
    with pytest.raises(Exception, match=f"{note.update_info['names'][0]!r} comes as \\[1, 1\\]"):
        ray.get(s.rollouts.workers[1].check_broadcast.remote(bad))


def test_a_restarted_worker_pulls_once_and_the_next_publish_rebuilds_the_group(session):
    s = session
    if s.version < 1:
        s.step(random_samples(4, seed=0))
        s.publish()
    docs = _docs()
    jobs = [BuildJob(f"x{i}", "c", docs, group_size=1, seed=i, min_version=s.version) for i in range(2)]
    batch = s.rollouts.run(jobs, s.sync.box)  # x0's first worker dies; its redo pulls the weights
    assert s.rollouts.failures == 1
    assert all(r.policy_version == s.version for recs in batch.values() for r in recs)
    rebuilds = s.sync.rebuilds
    s.step(random_samples(4, seed=1))
    assert s.publish() == 2 and s.sync.rebuilds == rebuilds + 1
    _assert_workers_hold(s, 2)

    # restarted by Ray between batches, before the pool noticed: the publish's check finds it outside the group
    import ray

    worker = s.rollouts.workers[1]
    pid = ray.get(worker.pid.remote())
    ray.kill(worker, no_restart=False)
    while True:
        try:
            if ray.get(worker.pid.remote(), timeout=60) != pid:
                break
        except ray.exceptions.RayActorError:
            time.sleep(0.5)
    s.step(random_samples(4, seed=2))
    assert s.publish() == 3 and s.sync.rebuilds == rebuilds + 2
    _assert_workers_hold(s, 3)


def _docs() -> list:
    return [Document(f"d{i}", f"Person {i} lives in town {i}.", path=f"d{i}.md") for i in range(3)]


def test_the_weights_never_travel_through_the_object_store_on_publish(session):
    """A publish's object-store entry is the small note: no tensor in it."""
    import ray

    note = ray.get(session.sync.box[0])
    assert len(pickle.dumps(note.update_info)) < 20_000 and not any(
        isinstance(v, torch.Tensor) for v in vars(note).values())
