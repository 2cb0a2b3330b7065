"""`RLSession`: the Ray side of one RL run, started in one place.

In order: Ray (`topology.start`, which joins the cluster `ray.address` or
$RAY_ADDRESS names, else starts a local one), the placement group (learner
bundles, then one per rollout worker), the learner (`learner_start.start_learner`:
one actor, or a data-parallel group for `learner.workers > 1`), the rollout
workers (`RolloutPool` of the recipe's worker class, built from its config
sections), the answerer probe pool when the recipe has one, and the weight
sync: `WeightSync` (the object store), or, for full weights with
`rollout.options.weight_transfer` 'nccl' (vLLM engines) or 'broadcast' (`hf`
models), `BroadcastSync`, whose group the learner and every worker join here
(`weight_sync_config.broadcast_transport` picks it; docs/cluster.md).
`close()` stops all of it (and Ray, when this session started it). The
probes (`rewards.construction.Probes`) are chosen here, once: the probe pool, or `LocalProbes` in this
process for `probe.workers: 0`. Everything is driven through typed methods
(`protocols.StepSession`, `ExamSession`): `rollout` (jobs on the workers,
on the weights `published()` handed out), `probe` (a snapshot's exam),
`step`, `sft`, `save`, `load`, `trainable_norm`, and `publish` (the weights
to the workers).

Every wait on the learner is bounded (`learner.call_timeout_s`, per SFT step
for `sft`; a publish by `rollout.sync_timeout_s`): past it the call fails with
`waits.CallTimeoutError` naming the call, the actor and the key. With
`rollout.colocate` learner rank i and rollout worker i share one GPU: before
the learner's `step` or `sft` every worker's engine sleeps
(`rollout.sleep_level`), and before the next publish the learner releases its
cached memory and every engine wakes up, then loads the new weights.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from librarian.cluster import topology
from librarian.cluster.learner_start import start_learner
from librarian.cluster.probe_pool import ProbePool
from librarian.cluster.rollout_pool import RolloutPool
from librarian.cluster.rollout_worker import RolloutConfig
from librarian.cluster.topology import RayConfig, TopologyError
from librarian.cluster.waits import learner_timeout, wait_for
from librarian.cluster.weight_sync import BroadcastSync, WeightSync
from librarian.cluster.weight_sync_config import backend_options, broadcast_transport
from librarian.datasets.records import Question
from librarian.learner.batch import PolicySample
from librarian.learner.config import LearnerConfig
from librarian.rewards.construction import Probes
from librarian.rewards.probe_exam import ExamResult, LocalProbes
from librarian.rl.protocols import WeightsBox
from librarian.workspace.snapshot import Snapshot

log = logging.getLogger(__name__)


def learner_model(rollout: RolloutConfig) -> tuple[str, dict]:
    """The learner's base model: the rollout backend's (a vLLM policy is trained with transformers)."""
    opts = backend_options(rollout.backend, rollout.options)
    if rollout.backend == "vllm":
        return "hf", {"model": opts.get("model", "smollm2")}
    return rollout.backend, opts


class RLSession:
    """The learner, the rollout pool, the probes and the weight sync of one run."""

    def __init__(self, ray_cfg: RayConfig, rollout: RolloutConfig, learner_cfg: LearnerConfig, worker_cls: type,
                 worker_args: Sequence[Any], probe: Any = None) -> None:
        """`worker_cls(*worker_args)` is a rollout worker (its args: config sections); `probe`: a `ProbeConfig`
        (None: no probes; `probe.workers` 0: probes run in this process)."""
        self.started_ray = False
        self.topo: Any = None
        self.learner: Any = None
        self.rollouts: Any = None
        self.probes: Probes | None = None  # the probe pool, or LocalProbes (probe.workers 0)
        self.learner_cfg = learner_cfg
        self.colocated, self.sleep_level, self.asleep = rollout.colocate, rollout.sleep_level, False
        needed = (ray_cfg.learner_cpus * learner_cfg.workers + rollout.workers * rollout.cpus_per_worker
                  + (probe.workers if probe is not None else 0))
        self.started_ray = topology.start(ray_cfg, needed)
        try:
            self._start(ray_cfg, rollout, learner_cfg, worker_cls, worker_args, probe)
        except BaseException:
            self.close()
            raise

    def _start(self, ray_cfg: RayConfig, rollout: RolloutConfig, learner_cfg: LearnerConfig, worker_cls: type,
               worker_args: Sequence[Any], probe: Any) -> None:
        # refused before any actor starts when the rollout backend cannot receive that way
        transport = broadcast_transport(rollout.backend, rollout.options, learner_cfg.lora.enabled, learner_cfg.device)
        self.topo = topology.Topology(ray_cfg, topology.Resources(rollout.cpus_per_worker, rollout.gpus_per_worker),
                                      rollout.workers, colocate=rollout.colocate)
        self.topo.reserve()
        # the learner first: a learner group re-reserves the placement group with its ranks' bundles
        backend, options = learner_model(rollout)
        self.learner = start_learner(self.topo, backend, options, learner_cfg, rollout.torch_threads)
        self.rollouts = RolloutPool(worker_cls, worker_args, self.topo.rollout_options(), rollout.max_restarts)
        if probe is not None:
            self.probes = ProbePool.of(probe) if probe.workers > 0 else LocalProbes(probe)
        ipc = rollout.backend == "vllm" and rollout.options.get("weight_transfer") == "ipc" and not learner_cfg.lora.enabled
        self.sync = WeightSync(rollout.sync_timeout_s, "ipc" if ipc else "")
        self._wait_learner(rollout.start_timeout_s)
        self.rollouts.ready()
        if transport:  # every worker joins the learner's group while it connects
            dtype = str(rollout.options.get("dtype", "float32")) if rollout.backend == "vllm" else ""
            self.sync = BroadcastSync(self.learner, self.rollouts, transport, dtype, timeout_s=rollout.sync_timeout_s)
            self.sync.open()

    def _wait_learner(self, timeout_s: float) -> None:
        """Block until the learner (every rank of a group) has started, at most `timeout_s` seconds."""
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            ray.get(self.learner.pid.remote(), timeout=timeout_s)
        except GetTimeoutError as exc:
            raise TopologyError(f"the learner did not start within {timeout_s:g} s (rollout.start_timeout_s): "
                                f"Ray could not place it, or loading its model took longer; raise the key or "
                                f"check `ray status`") from exc

    @property
    def version(self) -> int:
        """The latest published policy version (-1 before the first publish)."""
        return self.sync.version

    def published(self) -> WeightsBox:
        """The latest published weights as the workers fetch them (a copy: a later publish does not change it)."""
        return list(self.sync.box)

    def rollout(self, jobs: Sequence[Any], weights: WeightsBox | None = None) -> dict[str, list[Any]]:
        """Every job's records by job id, run on the rollout workers on `weights` (default: the latest
        published; a worker loads them first when a job needs a newer version than it holds)."""
        return self.rollouts.run(jobs, self.published() if weights is None else weights)

    @property
    def rollout_failures(self) -> int:
        """Rollout worker deaths seen so far (their jobs were redone)."""
        return int(self.rollouts.failures)

    def stop_rollouts(self) -> None:
        """Abandon rollouts still running (the loop failed): the pool's workers stop."""
        self.rollouts.close()

    def probe(self, snapshot: Snapshot, questions: Sequence[Question], repeats: int = 1) -> list[ExamResult]:
        """The answerer probe's graded answers to `questions` on the frozen workspace `snapshot`."""
        if self.probes is None:
            raise TopologyError("this session has no answerer probe (the recipe passed no probe section)")
        return self.probes.run_many([(snapshot.key, snapshot.data, questions)], repeats)[0]

    def publish(self) -> int:
        """The learner's current weights to the workers (the object store, or a broadcast); their version.
        Colocated engines wake up first (the learner's cached memory released for them)."""
        if self.asleep:
            self._call("release_memory")
            self.rollouts.call_all("wake_up")
            self.asleep = False
        return self.sync.publish(self.learner)

    def step(self, samples: Sequence[PolicySample]) -> dict[str, float]:
        """One GRPO update on `samples` (colocated engines sleep first); the learner's metrics."""
        return self._call("step", samples)

    def sft(self, samples: Sequence[PolicySample], epochs: int = 1, batch_size: int = 8, seed: int = 0,
            lr: float = 0.0, eps: float = 0.0) -> list[dict]:
        """SFT on `samples` (then the fine-tuned policy is the KL reference; colocated engines sleep first); each
        step's metrics. `lr`, `eps`: SFT's own (0: the learner's). Its limit is `learner.call_timeout_s` per SFT
        step."""
        return self._call("sft", samples, epochs, batch_size, seed, lr, eps)

    def save(self, folder: str | Path, extra: dict | None = None) -> str:
        """A learner checkpoint in `folder` (weights, optimizer, RNG, `extra`); the folder written."""
        return self._call("save", str(folder), extra)

    def load(self, folder: str | Path) -> dict:
        """Restore the learner from the checkpoint in `folder`; the `extra` it was saved with."""
        return self._call("load", str(folder))

    def trainable_norm(self) -> float:
        """The L2 norm of the learner's trainable weights."""
        return float(self._call("trainable_norm"))

    def _call(self, method: str, *args: Any) -> Any:
        """`method(*args)` on the learner (actor or group), waited for at most `learner.call_timeout_s` (per SFT
        step for `sft`; a group gets a minute more, so its own error, naming the rank, comes first). Colocated
        engines sleep before a `step` or `sft`."""
        if self.colocated and method in ("step", "sft") and not self.asleep:
            self.rollouts.call_all("sleep", self.sleep_level)
            self.asleep = True
        seconds = learner_timeout(self.learner_cfg, method, args)
        if seconds and self.learner_cfg.workers > 1:
            seconds += 60.0
        return wait_for(getattr(self.learner, method).remote(*args), seconds, f"learner call {method}()",
                        self.learner, "learner.call_timeout_s")

    def close(self) -> None:
        """Stop the pools and the learner, release the placement group; shut Ray down if this session started it."""
        import ray

        sync = getattr(self, "sync", None)
        if sync is not None and self.learner is not None:
            sync.close()
        for pool in (self.probes, self.rollouts):
            if pool is not None:
                pool.close()
        if self.learner is not None:
            ray.kill(self.learner, no_restart=True)
        if self.topo is not None:
            self.topo.release()
        if self.started_ray:
            ray.shutdown()
        self.probes = self.rollouts = self.learner = self.topo = None
