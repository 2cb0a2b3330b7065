"""`BuilderRolloutWorker`: a policy backend, workspaces and the episode loop; G builds per corpus.

A `BuildJob` is one corpus at one step: the worker builds `group_size`
workspaces from the corpus documents and runs the Librarian builder role on
all of them in one batched episode loop. Every `reward.every` turns (at most
`reward.max_probes` times) the env wrapper freezes the workspace as Arrow IPC
bytes for the probe pool; the final workspace is frozen too. Training jobs
get a hint every `rollout.hint_every` turns (hint-guided GRPO); evaluation
jobs never do. Each `RolloutRecord` carries the policy version that
generated it.

The worker is built from the config sections themselves (`rollout`, a
`BuilderRolloutConfig`, and `reward`); the backend is chosen by name (`hf`,
`vllm`, `scripted`); weights are loaded through `weight_sync.apply_weights`
before a job when the job asks for a newer version than the worker holds, or
arrive by broadcast from the learner (`join_broadcast`, `receive_broadcast`:
`weight_sync.BroadcastSync` drives them).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from typing import Any

from librarian.cluster.builder_hints import HintReference, builder_hint, consolidated_sources
from librarian.cluster.faults import CrashPlan
from librarian.cluster.weight_sync import (
    BroadcastEndpoint,
    WeightSyncError,
    apply_weights,
    backend_options,
    resolve,
)
from librarian.config import ConfigError
from librarian.rewards.construction import RewardConfig
from librarian.roles.builder_task import build_task

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


EXECUTORS = ("extractive", "none")
TOOL_LISTINGS = ("schema", "signatures")


@dataclass
class BuilderRolloutConfig(RolloutConfig):
    """The builder's rollout workers (paper 000: horizon 32 actions, no hints)."""

    listing_lines: int = 40
    content_executor: str = "extractive"  # who writes file text the builder leaves out: extractive | none
    tool_listing: str = "schema"  # schema: JSON schemas in the system turn | signatures: a short line a tool

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.content_executor not in EXECUTORS:
            raise ConfigError(f"rollout.content_executor must be one of {', '.join(EXECUTORS)}, "
                              f"got {self.content_executor!r}")
        if self.tool_listing not in TOOL_LISTINGS:
            raise ConfigError(f"rollout.tool_listing must be one of {', '.join(TOOL_LISTINGS)}, "
                              f"got {self.tool_listing!r}")


@dataclass
class BuildJob:
    """One corpus to build `group_size` times; `hints` empty at evaluation."""

    job_id: str
    corpus_id: str
    docs: list  # librarian.workspace.Document
    group_size: int = 4
    seed: int = 0
    min_version: int = -1  # load published weights first when the worker is older
    hints: list[HintReference] = field(default_factory=list)
    greedy: bool = False
    teacher: str = ""  # a scripted policy name: run it instead of the backend, tokenized by the backend
    budget: int = 0  # builder actions; 0: the rollout section's budget


@dataclass
class RolloutRecord:
    """One build: its trajectory, the version that produced it, the frozen probe and final workspaces."""

    job_id: str
    corpus_id: str
    index: int
    trajectory: Any  # librarian.roles.Trajectory
    policy_version: int
    probes: dict[int, bytes]  # builder turn (1-based) -> snapshot IPC bytes
    final: bytes
    build_costs: list[float]  # actions per turn
    worker_pid: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.index)


class ProbingEnv:
    """A builder `ToolEnv` that freezes the workspace at probe turns and adds training hints."""

    def __init__(self, env: Any, workspace: Any, schedule: Any, hint_every: int, hints: list[HintReference]) -> None:
        self.env = env
        self.workspace = workspace
        self.schedule = schedule
        self.hint_every = hint_every if hints else 0
        self.hints = hints
        self.turn = 0
        self.calls: list[dict] = []
        self.probes: dict[int, bytes] = {}

    def reset(self) -> Any:
        return self.env.reset()

    def answer_tools(self) -> Any:
        return self.env.answer_tools()

    def final_answer(self, text: str) -> Any:
        return self.env.final_answer(text)

    def step(self, text: str, actions_left: int) -> Any:
        step = self.env.step(text, actions_left)
        self.turn += 1
        self.calls.extend({"name": c.name, "arguments": c.arguments} for c in step.calls)
        if self.schedule.should_probe(self.turn, len(self.probes)):
            self.probes[self.turn] = snapshot(self.workspace)
        if self.hint_every and self.turn % self.hint_every == 0 and not step.terminated:
            hint = builder_hint(self.hints, consolidated_sources(self.calls), self.turn)
            if hint:
                step = replace(step, observation=f"{step.observation}\n\n{hint}")
        return step


def content_executor(name: str) -> dict:
    """The `ToolContext.extra` that attaches the named content executor (`none`: nothing attached)."""
    if name in ("", "none"):
        return {}
    if name != "extractive":
        raise ValueError(f"rollout.content_executor must be extractive or none, got {name!r}")
    from librarian.roles.content_executor import EXECUTOR_KEY, ExtractiveExecutor

    return {EXECUTOR_KEY: ExtractiveExecutor()}


def snapshot(workspace: Any) -> bytes:
    """A workspace as Arrow IPC stream bytes (what travels to the probe pool)."""
    from librarian.workspace import codec

    return codec.table_to_ipc_bytes(workspace.to_table())


class TeacherBackend:
    """A scripted policy whose messages are tokenized by a model backend, so they can be trained on (SFT)."""

    def __init__(self, policy: str, tokenizer_backend: Any) -> None:
        from librarian.models import make_backend

        self.scripted = make_backend("scripted", policy=policy)
        self.tok = tokenizer_backend
        self.name = f"teacher:{policy}"
        self.honours_grammar = False  # its text is the program's, not sampled under a grammar

    def render_prompt(self, messages: Any, tools: Any = None) -> str:
        return self.tok.render_prompt(messages, tools)

    def generate(self, conversations: Any, tools: Any, params: Any) -> list:
        from librarian.models.base import Sample

        out = []
        for conv, row in zip(conversations, self.scripted.generate(conversations, tools, params), strict=True):
            text = row[0].text
            ids = tuple(self.tok.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append([Sample(text=text, token_ids=ids, logprobs=(0.0,) * len(ids),
                               prompt_token_ids=tuple(self.tok.encode_prompt(conv, tools)))] * params.n)
        return out


class BuilderRolloutWorker:
    """Owns one policy backend; runs build jobs; loads published weights on demand."""

    def __init__(self, spec: RolloutConfig, reward: RewardConfig | None = None, backend: Any = None) -> None:
        """`spec`: the rollout section; `reward`: the probe schedule (`every`, `max_probes`; default paper 000's);
        `backend`: an already built policy backend (in-process use), None builds `spec.backend`."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if spec.torch_threads:
            import torch

            torch.set_num_threads(spec.torch_threads)
        from librarian.models import make_backend

        self.spec = spec
        self.reward = reward or RewardConfig()
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

    def loop_config(self, job: Any, paths: tuple[str, ...] = (), folders: tuple[str, ...] = ()) -> Any:
        """The episode loop's settings for `job`: its sampling, and the grammar (`sources` held to `paths`,
        `list` to `folders`) unless a scripted teacher plays it (the teacher still sees the compact listing)."""
        from librarian.models.base import SamplingParams
        from librarian.roles import LoopConfig

        spec: BuilderRolloutConfig = self.spec  # type: ignore[assignment]
        return LoopConfig(SamplingParams(max_new_tokens=spec.max_new_tokens,
                                         temperature=0.0 if job.greedy else spec.temperature, top_p=spec.top_p,
                                         seed=job.seed),
                          constrained=spec.constrained and not job.teacher, compact_listing=spec.constrained,
                          grammar_enums=tuple((k, v) for k, v in (("sources", paths), ("list.path", folders)) if v),
                          tool_listing=spec.tool_listing)

    def teacher(self, job: Any) -> TeacherBackend:
        """The scripted policy that plays `job.teacher`, tokenized by the policy's tokenizer."""
        return TeacherBackend(job.teacher, self.backend)

    def episodes(self, job: Any, envs: list, role: Any, paths: tuple[str, ...] = (),
                 folders: tuple[str, ...] = ()) -> list:
        """The job's environments in one batched episode loop (the teacher's or the policy's), greedy at
        evaluation, seeded by the job; then the injected crash point after the work. Under the grammar
        `sources` may name only `paths` (the raw documents) and `list` only `folders` (those that exist)."""
        from librarian.roles import run_episodes

        spec: BuilderRolloutConfig = self.spec  # type: ignore[assignment]
        backend = self.teacher(job) if job.teacher else self.backend
        trajectories = run_episodes(envs, backend, role, self.loop_config(job, paths, folders))
        if spec.crash.should_crash(job.job_id, job.group_size):
            spec.crash.crash(job.job_id)
        return trajectories

    def run(self, job: BuildJob, box: list | None = None) -> list[RolloutRecord]:
        """Build the job's corpus `group_size` times; one record per build, in group order."""
        from librarian.rewards.probes import ProbeSchedule
        from librarian.roles import ToolContext, ToolEnv, librarian_builder
        from librarian.workspace import Workspace

        self.begin(job, box)
        spec: BuilderRolloutConfig = self.spec  # type: ignore[assignment]
        schedule = ProbeSchedule(every=self.reward.every, max_probes=self.reward.max_probes)
        role = librarian_builder(budget=job.budget or spec.budget)
        envs, spaces = [], []
        for _ in range(job.group_size):
            ws = Workspace.from_documents(job.docs)
            spaces.append(ws)
            env = ToolEnv(role, ToolContext(ws, extra=content_executor(spec.content_executor)),
                          build_task(ws, spec.listing_lines))
            envs.append(ProbingEnv(env, ws, schedule, spec.hint_every, job.hints))
        paths = tuple(n.path for n in spaces[0] if n.kind == "raw") if spec.constrained else ()
        folders = ("", *(n.path for n in spaces[0] if n.kind == "directory")) if spec.constrained else ()
        trajectories = self.episodes(job, envs, role, paths, folders)
        return [RolloutRecord(job.job_id, job.corpus_id, i, traj, self.version, env.probes, snapshot(ws),
                              [float(t.actions) for t in traj.turns], os.getpid())
                for i, (traj, env, ws) in enumerate(zip(trajectories, envs, spaces, strict=True))]
