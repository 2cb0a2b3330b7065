"""`RolloutWorker`: one policy backend, its weights and their sync, and batched episodes from an env factory.

The worker is generic: what a job's episodes are comes from its environment
factory (`EnvFactory`: the builder's in `builder_worker`, the researcher's in
`researcher_worker`), which turns a job into its records in one call
(`run(job, backend, version)`: the environments, the role they play, the
loop's sampling and grammar, a scripted teacher when the job names one, one
batched episode loop, the records). The worker owns the rest: the backend, chosen by
name (`hf`, `vllm`, `scripted`) from the `rollout` section (`RolloutConfig`);
weights loaded through `weight_sync_worker.apply_weights` before a job when the job
asks for a newer version than the worker holds, or received by broadcast
from the learner (`join_broadcast`, `receive_broadcast`:
`weight_sync.BroadcastSync` drives them); a colocated engine's sleep and
wake-up; and the injected crash points (tests). Each record carries the
policy version that generated it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from librarian.cluster.faults import CrashPlan
from librarian.cluster.weight_sync_config import WeightSyncError, backend_options
from librarian.cluster.weight_sync_worker import BroadcastEndpoint, apply_weights, resolve
from librarian.config import ConfigError
from librarian.models import make_backend
from librarian.models.base import SamplingParams

log = logging.getLogger(__name__)


@dataclass
class RolloutConfig:
    """A training pipeline's `rollout` section, which is also what its rollout workers are built from: backend,
    resources, the episode's budget, sampling, hints, threads, and whether rollouts overlap learning."""

    backend: str = "hf"  # hf | vllm | scripted (a teacher) ... any `make_backend` name
    options: dict = field(default_factory=lambda: {"model": "smollm2"})
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_restarts: int = 4
    start_timeout_s: float = 1200.0  # a worker's start or restart (> a vLLM engine's own limit, 900 s by default)
    call_timeout_s: float = 3600.0  # one job on one worker (0: no limit)
    budget: int = 32  # actions (builder) or rounds (researcher) per episode
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    hint_every: int = 0  # K_h: a hint every K_h turns of a training rollout (0: off); never at evaluation
    torch_threads: int = 0  # 0: torch's default
    crash: CrashPlan = field(default_factory=CrashPlan)  # injected faults (tests)
    constrained: bool = True  # tool calls sampled under the tools' grammar (a teacher's never are)
    asynchronous: bool = False  # one-step off-policy: step t+1's rollouts run on the weights before update t
    # while the learner updates on step t (staleness 1, bounded by off_policy.max_staleness)
    sync_timeout_s: float = 1800.0  # one weight publish: the learner's payload, or a broadcast round and the
    # workers joining its group (0: no limit)
    colocate: bool = False  # learner rank i and rollout worker i share one GPU (one bundle); the engine sleeps
    # (sleep_level) while the learner updates and wakes before the next publish (docs/cluster.md)
    sleep_level: int = 1  # colocate: vLLM's LLM.sleep level: 1 offloads the weights to CPU memory, 2 drops them
    # (full-weight runs, which load new weights after every update)

    def __post_init__(self) -> None:
        for name in ("workers", "budget", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
        if self.hint_every < 0 or self.max_restarts < 0 or self.cpus_per_worker < 0 or self.gpus_per_worker < 0:
            raise ConfigError("rollout.hint_every, max_restarts, cpus_per_worker and gpus_per_worker must be >= 0, "
                              f"got {self.hint_every}, {self.max_restarts}, {self.cpus_per_worker}, "
                              f"{self.gpus_per_worker}")
        if not self.start_timeout_s > 0 or not self.call_timeout_s >= 0:
            raise ConfigError(f"rollout.start_timeout_s must be > 0 and rollout.call_timeout_s >= 0 (0: no limit), "
                              f"got {self.start_timeout_s}, {self.call_timeout_s}")


def sampling(spec: RolloutConfig, job: Any) -> SamplingParams:
    """A job's sampling: the rollout section's, greedy at evaluation (`job.greedy`), seeded by the job."""
    return SamplingParams(max_new_tokens=spec.max_new_tokens, temperature=0.0 if job.greedy else spec.temperature,
                          top_p=spec.top_p, seed=job.seed)


class EnvFactory(Protocol):
    """What a kind of rollout job needs from its worker's environment factory."""

    def run(self, job: Any, backend: Any, version: int) -> list:
        """The job's `group_size` episodes in one batched loop, played by `backend` (or by the scripted teacher
        `job.teacher`, tokenized by it), as its records in group order, each carrying `version`."""
        ...


class RolloutWorker:
    """Owns one policy backend; runs the jobs its environment factory turns into episodes; loads published weights."""

    def __init__(self, spec: RolloutConfig, env_factory: EnvFactory, backend: Any = None) -> None:
        """`spec`: the rollout section; `env_factory`: the jobs' environments (`BuilderEnvFactory`,
        `ResearcherEnvFactory`); `backend`: an already built policy backend (in-process use), None builds
        `spec.backend`."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if spec.torch_threads:
            import torch

            torch.set_num_threads(spec.torch_threads)
        self.spec = spec
        self.env_factory = env_factory
        self.backend = backend if backend is not None else make_backend(spec.backend,
                                                                        **backend_options(spec.backend, spec.options))
        self.version = int(getattr(self.backend, "policy_version", -1))
        self.endpoint = BroadcastEndpoint(self.backend)
        self.asleep, self.wakes = False, 0  # a colocated engine sleeps while the learner updates

    def pid(self) -> int:
        return os.getpid()

    def policy_version(self) -> int:
        return self.version

    def load(self, payload: Any) -> int:
        """Load published weights (refuses to go back in time)."""
        self._awake(f"weights version {payload.version}")
        self.version = apply_weights(self.backend, payload)
        return self.version

    def sync(self, min_version: int, box: list) -> None:
        """Fetch and load `box[0]` when this worker's weights are older than `min_version` (under broadcast sync
        the box holds a note: a worker that missed the broadcast pulls the learner's weights once)."""
        if self.version >= min_version:
            return
        if not box:
            raise WeightSyncError(f"job needs policy version {min_version} but no weights were published")
        import ray

        self.load(resolve(ray.get(box[0])))
        if self.version < min_version:
            raise WeightSyncError(f"loaded version {self.version}, the job needs {min_version}")

    def broadcast_ranks(self) -> int:
        """Ranks this worker's backend adds to the learner's weight broadcast group."""
        return self.endpoint.ranks()

    def join_broadcast(self, init_info: dict) -> None:
        """Join the learner's broadcast group (the learner connects meanwhile)."""
        self.endpoint.join(init_info)

    def check_broadcast(self, update_info: dict) -> bool:
        """Refuse a broadcast round whose tensor list does not fit this worker's model; whether it is in the group."""
        return self.endpoint.check(update_info)

    def receive_broadcast(self, version: int, update_info: dict) -> int:
        """Receive the weights the learner broadcasts meanwhile; the version now loaded."""
        self._awake(f"weights version {version}")
        self.version = self.endpoint.receive(version, update_info)
        return self.version

    def leave_broadcast(self) -> None:
        self.endpoint.leave()

    def sleep(self, level: int) -> None:
        """Free the engine's GPU memory while a colocated learner updates (vLLM: `LLM.sleep(level)`; a backend
        without a sleep mode keeps its memory). No job or weight load is taken until `wake_up`."""
        own = getattr(self.backend, "sleep", None)
        if callable(own):
            own(level)
        self.asleep = True

    def wake_up(self) -> int:
        """The engine's memory back (vLLM: `LLM.wake_up()`); how many times this worker has woken."""
        own = getattr(self.backend, "wake_up", None)
        if callable(own):
            own()
        self.asleep = False
        self.wakes += 1
        return self.wakes

    def _awake(self, what: str) -> None:
        if self.asleep:
            raise WeightSyncError(f"{what} reached a sleeping rollout engine (colocated with the learner): the "
                                  "driver must wake it (wake_up) before it samples or loads weights")

    def begin(self, job: Any, box: list | None) -> None:
        """Before a job: load newer weights if it needs them; the injected crash point before any work."""
        self._awake(f"job {job.job_id}")
        self.sync(job.min_version, box or [])
        if self.spec.crash.should_crash(job.job_id, 0):
            self.spec.crash.crash(job.job_id)

    def run(self, job: Any, box: list | None = None) -> list:
        """The job's `group_size` episodes; one record per episode, in group order. The injected crash points
        (tests) come before any work and after it."""
        self.begin(job, box)
        records = self.env_factory.run(job, self.backend, self.version)
        if self.spec.crash.should_crash(job.job_id, job.group_size):
            self.spec.crash.crash(job.job_id)
        return records
