"""`ResearcherRolloutWorker`: the JAM researcher's rollout worker; G research episodes per question.

A `ResearchJob` is one question over one memory workspace at one step. The
workspace travels once per task: the job carries the Arrow IPC snapshot
(bytes, or a Ray object ref to them) and its content hash, and the worker
rebuilds the `Workspace` and its search context (`research_context`: an
embedded BM25 + dense index) once per hash and caches them. The worker runs
the researcher role `group_size` times over the cached context in one batched
episode loop (`ResearchEnv`, a budget in rounds, forced finalize).

Training jobs carry a `HintInput` (the reference answer and gold sources):
their episodes are wrapped in `HintedEnv` with `HintSchedule(enabled=True,
every=K_h)` and the scripted hint generator. Evaluation jobs carry no hint and
never see one. A job with a `teacher` runs that scripted policy instead of the
model, tokenized by the model's tokenizer (`TeacherBackend`), for SFT.

With `constrained` (the default) every policy turn is sampled under the
grammar of the researcher's tools (`tool_call_grammar`: a short free-text
thought when `free_text`, then 1..`max_calls_per_turn` tool calls), so every
sampled call parses; the forced finalize is sampled under the finalize
tool's grammar. With `enum_paths` the `path` and `sources` arguments are held
to the workspace's node paths (`path` also to '' for the top folder): memo
paths in the hierarchical store are often longer than the grammar's generic
path pattern allows, and a sampled path then always exists. Teacher turns
are the scripted policy's text and are never constrained
(`TeacherBackend.honours_grammar` is False, and the loop is not constrained
for teacher jobs); for a constrained student the JAM researcher teacher
writes in the compact layout, so each of its turns is a sentence of the
grammar its student samples under (`loop_config` of the student's job).

The worker shares `BuilderRolloutWorker`'s surface and weight loading (`pid`,
`policy_version`, `load`, `sync`), so the `RolloutPool`, the learner and
`WeightSync` are the builder's. It is built from the config sections
themselves: `rollout` (a `ResearcherRolloutConfig`) and `search`.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from librarian.cluster.rollout_worker import BuilderRolloutWorker, RolloutConfig, TeacherBackend
from librarian.config import ConfigError
from librarian.roles.researcher_hints import HintedEnv, HintInput, HintSchedule, scripted_hint

log = logging.getLogger(__name__)


class ResearchJobError(ValueError):
    """A research job's workspace did not match its hash or could not be decoded."""


@dataclass
class ResearchSearchConfig:
    """The researcher's search during training: mode (hybrid = BM25 + dense) and the embedder."""

    mode: str = "hybrid"  # hybrid | bm25 | dense
    embedder: str = "hashing"  # minilm (bundled all-MiniLM-L6-v2) | hashing (fast, for CPU runs)
    snippet_chars: int = 160  # characters of a search hit's snippet (keeps CPU prompts short)

    def __post_init__(self) -> None:
        from librarian.evaluation.memory_arms import SEARCH_MODES

        for name, value, allowed in (("search.mode", self.mode, SEARCH_MODES),
                                     ("search.embedder", self.embedder, ("minilm", "hashing"))):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass
class ResearcherRolloutConfig(RolloutConfig):
    """The researcher's rollout workers: rounds, calls per round, sampling, hints (K_h), grammar, cache."""

    budget: int = 4  # research rounds per episode (paper 002: 20)
    max_new_tokens: int = 96
    hint_every: int = 2  # K_h: a hint every K_h rounds of training rollouts (0: off); never at evaluation
    max_calls_per_turn: int = 4
    memory_window: int = 0  # 0: the whole conversation
    free_text: bool = True  # under the grammar, a short thought may precede the calls (think-explore-reflect)
    enum_paths: bool = True  # under the grammar, `path` and `sources` name the workspace's nodes (memo paths are long)
    cache_size: int = 4  # workspaces (with their search index) a worker keeps

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_calls_per_turn < 1 or self.cache_size < 1:
            raise ConfigError(f"rollout.max_calls_per_turn and rollout.cache_size must be >= 1, got "
                              f"{self.max_calls_per_turn}, {self.cache_size}")


@dataclass
class ResearchJob:
    """One question to research `group_size` times over the workspace `data` (IPC bytes or an object ref)."""

    job_id: str
    task_id: str
    question_id: str
    request: str
    group_size: int = 4
    seed: int = 0
    min_version: int = -1
    hint: HintInput | None = None  # training only; None at evaluation
    greedy: bool = False
    teacher: str = ""  # a scripted policy name (the teacher for SFT)
    budget: int = 0  # rounds; 0: the rollout section's
    data: Any = None  # Arrow IPC bytes of the workspace, or a Ray ObjectRef to them
    digest: str = ""  # the workspace's content hash (the cache key)


@dataclass
class ResearchRecord:
    """One research episode: its trajectory, its final context, the version that produced it."""

    job_id: str
    task_id: str
    question_id: str
    index: int
    trajectory: Any  # librarian.roles.Trajectory
    result: Any  # librarian.roles.researcher_tools.Finalized
    policy_version: int
    worker_pid: int
    hints: int = 0  # hints appended to its observations

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.index)


def decode_workspace(data: Any, digest: str) -> Any:
    """The `Workspace` of IPC bytes (a Ray ref is fetched first); its hash must equal `digest` when given."""
    from librarian.workspace import Workspace, codec

    if data is None:
        raise ResearchJobError("a research job needs its workspace (data=IPC bytes or an object ref)")
    if not isinstance(data, bytes | bytearray | memoryview):
        import ray

        data = ray.get(data)
    ws = Workspace.from_state(*codec.from_ipc_bytes(bytes(data)))
    if digest and ws.content_hash() != digest:
        raise ResearchJobError(f"workspace hash {ws.content_hash()[:12]} does not match the job's {digest[:12]}")
    return ws


def workspace_paths(workspace: Any) -> tuple[str, ...]:
    """Every node's path in the workspace (the values a constrained `path` or `sources` argument may take)."""
    return tuple(dict.fromkeys(n.path for n in workspace if n.path))


def workspace_folders(workspace: Any) -> tuple[str, ...]:
    """The workspace's folder paths: what a constrained `open` may name (`browse` takes the other paths)."""
    return tuple(dict.fromkeys(n.path for n in workspace if n.path and n.kind == "directory"))


def path_enums(paths: tuple[str, ...], folders: tuple[str, ...] = ()) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The grammar's enums over a workspace's paths: `sources` any path; with `folders`, `open` a folder or ''
    (the top) and `browse` any other path (a call the tool would refuse is not one the policy can write);
    without, `path` any path or ''."""
    if not paths:
        return ()
    if not folders:
        return (("path", ("", *paths)), ("sources", paths))
    kept = set(folders)
    return (("open.path", ("", *folders)), ("browse.path", tuple(p for p in paths if p not in kept)),
            ("sources", paths))


class ResearcherRolloutWorker(BuilderRolloutWorker):
    """Owns one policy backend and a few cached workspaces; runs research jobs; loads published weights."""

    def __init__(self, spec: ResearcherRolloutConfig, search: ResearchSearchConfig | None = None) -> None:
        """`spec`: the rollout section; `search`: the search section (default: hybrid, hashing embedder)."""
        super().__init__(spec)
        self.search = search or ResearchSearchConfig()
        self.contexts: OrderedDict[str, Any] = OrderedDict()
        self.rebuilt = 0

    def context(self, job: ResearchJob) -> Any:
        """The job's tool context, rebuilt once per workspace hash (least recently used ones dropped)."""
        from librarian.evaluation.memory_arms import research_context

        key = job.digest or f"job:{job.job_id}"
        if key in self.contexts:
            self.contexts.move_to_end(key)
            return self.contexts[key]
        ctx = research_context(decode_workspace(job.data, job.digest), self.search.mode, self.search.embedder)
        ctx = replace(ctx, snippet_chars=self.search.snippet_chars)
        self.rebuilt += 1
        self.contexts[key] = ctx
        while len(self.contexts) > max(1, self.spec.cache_size):  # type: ignore[attr-defined]
            self.contexts.popitem(last=False)
        return ctx

    def cache_info(self) -> dict[str, int]:
        """How many workspaces are cached and how many were rebuilt (tests check one rebuild per hash)."""
        return {"cached": len(self.contexts), "rebuilt": self.rebuilt}

    def loop_config(self, job: Any, paths: tuple[str, ...] = (), folders: tuple[str, ...] = ()) -> Any:
        """The episode loop's settings for `job`: its sampling (greedy at evaluation, seeded by the job), and
        the tools' grammar when `constrained` (the path arguments held to the workspace's `paths`, `open` to its
        `folders` and `browse` to the rest: `path_enums`; empty: any path-like string) unless a scripted teacher
        plays it (it still sees the compact listing)."""
        from librarian.models.base import SamplingParams
        from librarian.roles import LoopConfig

        spec: ResearcherRolloutConfig = self.spec  # type: ignore[assignment]
        return LoopConfig(SamplingParams(max_new_tokens=spec.max_new_tokens,
                                         temperature=0.0 if job.greedy else spec.temperature, top_p=spec.top_p,
                                         seed=job.seed),
                          constrained=spec.constrained and not job.teacher, compact_listing=spec.constrained,
                          free_text=spec.free_text,
                          grammar_enums=path_enums(paths, folders))

    def teacher(self, job: Any) -> TeacherBackend:
        """The job's scripted teacher; for a constrained student the JAM researcher writes only turns its
        grammar accepts (`ScriptedResearcher(compact=True)`)."""
        from librarian.models.scripted_researcher import ScriptedResearcher
        from librarian.roles.researcher_tools import JAM_RESEARCHER

        spec: ResearcherRolloutConfig = self.spec  # type: ignore[assignment]
        if job.teacher != JAM_RESEARCHER or not spec.constrained:
            return TeacherBackend(job.teacher, self.backend)
        policy = ScriptedResearcher(max_calls=min(ScriptedResearcher.max_calls, spec.max_calls_per_turn),
                                    compact=True, free_text=spec.free_text)
        backend = TeacherBackend(policy, self.backend)  # type: ignore[arg-type]
        backend.name = f"teacher:{job.teacher}"
        return backend

    def run(self, job: ResearchJob, box: list | None = None) -> list[ResearchRecord]:  # type: ignore[override]
        """Research the job's question `group_size` times; one record per episode, in group order."""
        from librarian.roles.definitions import jam_researcher
        from librarian.roles.researcher import ResearchEnv
        from librarian.roles.researcher_tools import finalized

        self.begin(job, box)
        spec: ResearcherRolloutConfig = self.spec  # type: ignore[assignment]
        ctx = self.context(job)
        role = jam_researcher(budget=job.budget or spec.budget, max_calls_per_turn=spec.max_calls_per_turn,
                              memory_window=spec.memory_window or None)
        envs: list[Any] = []
        for _ in range(job.group_size):
            env: Any = ResearchEnv(role, ctx, job.request)
            if job.hint is not None and spec.hint_every > 0:
                env = HintedEnv(env, scripted_hint, job.hint, HintSchedule(enabled=True, every=spec.hint_every))
            envs.append(env)
        enum = spec.constrained and spec.enum_paths and not job.teacher
        paths, folders = (workspace_paths(ctx.workspace), workspace_folders(ctx.workspace)) if enum else ((), ())
        trajectories = self.episodes(job, envs, role, paths, folders)
        return [ResearchRecord(job.job_id, job.task_id, job.question_id, i, traj, finalized(traj.answer), self.version,
                               os.getpid(), len(getattr(env, "hints", [])))
                for i, (traj, env) in enumerate(zip(trajectories, envs, strict=True))]
