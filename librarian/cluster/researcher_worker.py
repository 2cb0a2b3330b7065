"""The researcher's rollouts: `ResearcherEnvFactory` (a research job's environments) and `ResearcherRolloutWorker`.

The workspace travels once per task: a `ResearchJob` carries the Arrow IPC
snapshot (bytes, or a Ray object ref to them) and its content hash, and the
factory rebuilds the `Workspace` and its search context (`research_context`:
an embedded BM25 + dense index) once per hash and caches them. It runs the
researcher role `group_size` times over the cached context in one batched
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

`ResearcherRolloutWorker(rollout, search)` is a `RolloutWorker` over this
factory (the same surface and weight loading as every rollout worker, so the
`RolloutPool`, the learner and `WeightSync` are shared), built from the config
sections themselves: `rollout` (a `ResearcherRolloutConfig`) and `search`.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from librarian.cluster.researcher_jobs import (
    ResearcherRolloutConfig,
    ResearchJob,
    ResearchRecord,
    ResearchSearchConfig,
)
from librarian.cluster.rollout_worker import RolloutWorker, sampling
from librarian.models.scripted.researcher import ScriptedResearcher
from librarian.roles import LoopConfig, run_episodes
from librarian.roles.definitions import jam_researcher
from librarian.roles.research_context import research_context
from librarian.roles.researcher import ResearchEnv
from librarian.roles.researcher_hints import HintedEnv, HintSchedule, scripted_hint
from librarian.roles.researcher_tools import JAM_RESEARCHER, finalized
from librarian.roles.teacher_backend import TeacherBackend
from librarian.workspace import Workspace, codec


class ResearchJobError(ValueError):
    """A research job's workspace did not match its hash or could not be decoded."""


def decode_workspace(data: Any, digest: str) -> Any:
    """The `Workspace` of IPC bytes (a Ray ref is fetched first); its hash must equal `digest` when given."""
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


class ResearcherEnvFactory:
    """A research job's environments over its workspace's cached search context."""

    def __init__(self, spec: ResearcherRolloutConfig, search: ResearchSearchConfig | None = None) -> None:
        """`spec`: the rollout section; `search`: the search section (default: hybrid, hashing embedder)."""
        self.spec = spec
        self.search = search or ResearchSearchConfig()
        self.contexts: OrderedDict[str, Any] = OrderedDict()
        self.rebuilt = 0

    def context(self, job: ResearchJob) -> Any:
        """The job's tool context, rebuilt once per workspace hash (least recently used ones dropped)."""
        key = job.digest or f"job:{job.job_id}"
        if key in self.contexts:
            self.contexts.move_to_end(key)
            return self.contexts[key]
        ctx = research_context(decode_workspace(job.data, job.digest), self.search.mode, self.search.embedder)
        ctx = replace(ctx, snippet_chars=self.search.snippet_chars)
        self.rebuilt += 1
        self.contexts[key] = ctx
        while len(self.contexts) > max(1, self.spec.cache_size):
            self.contexts.popitem(last=False)
        return ctx

    def cache_info(self) -> dict[str, int]:
        """How many workspaces are cached and how many were rebuilt (tests check one rebuild per hash)."""
        return {"cached": len(self.contexts), "rebuilt": self.rebuilt}

    def loop_config(self, job: ResearchJob, paths: tuple[str, ...] = (), folders: tuple[str, ...] = ()) -> LoopConfig:
        """The episode loop's settings for `job`: its sampling (greedy at evaluation, seeded by the job), and
        the tools' grammar when `constrained` (the path arguments held to the workspace's `paths`, `open` to its
        `folders` and `browse` to the rest: `path_enums`; empty: any path-like string) unless a scripted teacher
        plays it (it still sees the compact listing)."""
        spec = self.spec
        return LoopConfig(sampling(spec, job), constrained=spec.constrained and not job.teacher,
                          compact_listing=spec.constrained, free_text=spec.free_text,
                          grammar_enums=path_enums(paths, folders))

    def teacher(self, job: ResearchJob, backend: Any) -> TeacherBackend:
        """The job's scripted teacher; for a constrained student the JAM researcher writes only turns its
        grammar accepts (`ScriptedResearcher(compact=True)`)."""
        spec = self.spec
        if job.teacher != JAM_RESEARCHER or not spec.constrained:
            return TeacherBackend(job.teacher, backend)
        policy = ScriptedResearcher(max_calls=min(ScriptedResearcher.max_calls, spec.max_calls_per_turn),
                                    compact=True, free_text=spec.free_text)
        teacher = TeacherBackend(policy, backend)  # type: ignore[arg-type]
        teacher.name = f"teacher:{job.teacher}"
        return teacher

    def run(self, job: ResearchJob, backend: Any, version: int) -> list[ResearchRecord]:
        """`group_size` research episodes over the job's cached context (hinted in training) in one batched loop,
        played by `backend` (or the job's teacher), and their records."""
        spec = self.spec
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
        policy = self.teacher(job, backend) if job.teacher else backend
        trajectories = run_episodes(envs, policy, role, self.loop_config(job, paths, folders))
        return [ResearchRecord(job.job_id, job.task_id, job.question_id, i, traj, finalized(traj.answer), version,
                               os.getpid(), len(getattr(env, "hints", [])))
                for i, (traj, env) in enumerate(zip(trajectories, envs, strict=True))]


class ResearcherRolloutWorker(RolloutWorker):
    """A `RolloutWorker` over `ResearcherEnvFactory`: built from the `rollout` and `search` sections."""

    def __init__(self, spec: ResearcherRolloutConfig, search: ResearchSearchConfig | None = None) -> None:
        super().__init__(spec, ResearcherEnvFactory(spec, search))

    def context(self, job: ResearchJob) -> Any:
        """The job's tool context (cached per workspace hash)."""
        return self.env_factory.context(job)  # type: ignore[attr-defined]

    def cache_info(self) -> dict[str, int]:
        """How many workspaces are cached and how many were rebuilt."""
        return self.env_factory.cache_info()  # type: ignore[attr-defined]
