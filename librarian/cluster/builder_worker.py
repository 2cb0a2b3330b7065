"""The builder's rollouts: `BuilderEnvFactory` (a build job's environments) and `BuilderRolloutWorker`.

For a `BuildJob` the factory builds `group_size` workspaces from the corpus
documents and runs the Librarian builder role on all of them in one batched
episode loop. Every `reward.every` turns (at most `reward.max_probes` times)
a `ProbingEnv` freezes the workspace for the probe pool (a `Snapshot`:
Arrow IPC bytes and their content hash, computed here where they are
encoded); the final workspace is frozen too, and both leave the environment
as its `outcome()`. Training jobs get a hint every
`rollout.hint_every` turns (hint-guided GRPO); evaluation jobs never do.
Under the grammar `sources` may name only the raw documents and `list` only
the folders that exist; with `rollout.merge_children: existing`, `merge_files`
may merge only synthetic files that exist in the group's builds at that turn.

`BuilderRolloutWorker(rollout, reward)` is a `RolloutWorker` over this
factory, built from the config sections themselves (`rollout`, a
`BuilderRolloutConfig`, and `reward`), as the rollout pool starts it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob, RolloutRecord
from librarian.cluster.rollout_worker import RolloutWorker, sampling
from librarian.rewards.construction import RewardConfig
from librarian.rewards.probes import ProbeSchedule
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder, run_episodes
from librarian.roles.builder_hints import HintReference, builder_hint, consolidated_sources
from librarian.roles.builder_task import build_task
from librarian.roles.content_executor import EXECUTOR_KEY, ExtractiveExecutor
from librarian.roles.probing_env import ProbingEnv
from librarian.roles.teacher_backend import TeacherBackend
from librarian.workspace import Workspace


def content_executor(name: str) -> dict:
    """The `ToolContext.extra` that attaches the named content executor (`none`: nothing attached)."""
    if name in ("", "none"):
        return {}
    if name != "extractive":
        raise ValueError(f"rollout.content_executor must be extractive or none, got {name!r}")
    return {EXECUTOR_KEY: ExtractiveExecutor()}


def synthetic_paths(spaces: Sequence[Workspace]) -> dict[str, tuple[str, ...]]:
    """The grammar's live enum for `merge_files`' children: the synthetic files that exist in any of `spaces`
    now (empty until a build creates one, when the children fall back to the path pattern)."""
    return {"merge_files.children": tuple(sorted({n.path for ws in spaces for n in ws if n.kind == "synthetic"}))}


def hint_for(references: Sequence[HintReference], calls: list[dict], turn: int) -> str | None:
    """The builder's hint after `calls` at `turn`: what readers will ask that is not consolidated yet."""
    return builder_hint(references, consolidated_sources(calls), turn)


class BuilderEnvFactory:
    """A build job's environments: `group_size` workspaces from the corpus, probed on the reward's schedule."""

    def __init__(self, spec: BuilderRolloutConfig, reward: RewardConfig | None = None) -> None:
        """`spec`: the rollout section; `reward`: the probe schedule (`every`, `max_probes`; default paper 000's)."""
        self.spec = spec
        self.reward = reward or RewardConfig()
        self.schedule = ProbeSchedule(every=self.reward.every, max_probes=self.reward.max_probes)

    def loop_config(self, job: BuildJob, paths: tuple[str, ...] = (), folders: tuple[str, ...] = ()) -> LoopConfig:
        """The episode loop's settings for `job`: its sampling, and the grammar (`sources` held to `paths`,
        `list` to `folders`) unless a scripted teacher plays it (the teacher still sees the compact listing)."""
        spec = self.spec
        return LoopConfig(sampling(spec, job), constrained=spec.constrained and not job.teacher,
                          compact_listing=spec.constrained,
                          grammar_enums=tuple((k, v) for k, v in (("sources", paths), ("list.path", folders)) if v),
                          tool_listing=spec.tool_listing, max_items=spec.max_items)

    def teacher(self, job: BuildJob, backend: Any) -> TeacherBackend:
        """The scripted policy that plays `job.teacher`, tokenized by the policy's tokenizer."""
        return TeacherBackend(job.teacher, backend)

    def run(self, job: BuildJob, backend: Any, version: int) -> list[RolloutRecord]:
        """`group_size` builds of fresh workspaces of each of the job's corpora (`job.parts()`) in one batched
        episode loop, played by `backend` (or the job's teacher), each corpus's environments under the grammar of
        its own paths; each build's record carries its `ProbingEnv`'s outcome (the snapshots of its probe turns
        and its final workspace)."""
        spec = self.spec
        role = librarian_builder(budget=job.budget or spec.budget)
        hint = (lambda calls, turn: hint_for(job.hints, calls, turn)) if job.hints else None
        envs, spaces, owners, env_enums = [], [], [], []
        for corpus_id, docs in job.parts():
            first = len(spaces)
            for i in range(job.group_size):
                ws = Workspace.from_documents(docs)
                spaces.append(ws)
                owners.append((corpus_id, i))
                env = ToolEnv(role, ToolContext(ws, extra=content_executor(spec.content_executor)),
                              build_task(ws, spec.listing_lines))
                envs.append(ProbingEnv(env, ws, self.schedule, spec.hint_every, hint))
            env_enums += [path_enums(spaces[first], spec.constrained)] * job.group_size
        several = len(job.parts()) > 1
        paths, folders = ((), ()) if several else (env_enums[0][0][1], env_enums[0][1][1])
        loop = self.loop_config(job, paths, folders)
        if several:
            loop = replace(loop, env_enums=tuple(env_enums))
        if spec.constrained and spec.merge_children == "existing":
            loop = replace(loop, live_enums=lambda: synthetic_paths(spaces))
        policy = self.teacher(job, backend) if job.teacher else backend
        records = []
        for (corpus_id, i), traj, env in zip(owners, run_episodes(envs, policy, role, loop), envs, strict=True):
            out = env.outcome()
            records.append(RolloutRecord(job.job_id, corpus_id, i, traj, version, out.probes, out.final,
                                         [float(t.actions) for t in traj.turns], os.getpid()))
        return records


def path_enums(ws: Workspace, constrained: bool) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The grammar's path enums of a workspace: `sources` its raw documents, `list.path` its folders (none
    unconstrained)."""
    if not constrained:
        return (("sources", ()), ("list.path", ()))
    return (("sources", tuple(n.path for n in ws if n.kind == "raw")),
            ("list.path", ("", *(n.path for n in ws if n.kind == "directory"))))


class BuilderRolloutWorker(RolloutWorker):
    """A `RolloutWorker` over `BuilderEnvFactory`: built from the `rollout` and `reward` sections."""

    def __init__(self, spec: BuilderRolloutConfig, reward: RewardConfig | None = None, backend: Any = None) -> None:
        """`backend`: an already built policy backend (in-process use), None builds `spec.backend`."""
        super().__init__(spec, BuilderEnvFactory(spec, reward), backend)
