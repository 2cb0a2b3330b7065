"""The builder's rollout section (`BuilderRolloutConfig`), its jobs (`BuildJob`) and their records (`RolloutRecord`).

A `BuildJob` is one corpus at one step, built `group_size` times; every
build comes back as a `RolloutRecord` with the workspace frozen at its probe
turns and at the end (`Snapshot`s: Arrow IPC bytes for the answerer probe and
their content hash).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.cluster.rollout_worker import RolloutConfig
from librarian.config import ConfigError
from librarian.roles.builder_hints import HintReference
from librarian.workspace.snapshot import Snapshot

EXECUTORS = ("extractive", "none")
TOOL_LISTINGS = ("schema", "signatures")
MERGE_CHILDREN = ("any", "existing")


@dataclass
class BuilderRolloutConfig(RolloutConfig):
    """The builder's rollout workers (paper 000: horizon 32 actions, no hints)."""

    listing_lines: int = 40
    content_executor: str = "extractive"  # who writes file text the builder leaves out: extractive | none
    tool_listing: str = "schema"  # schema: JSON schemas in the system turn | signatures: a short line a tool
    merge_children: str = "any"  # under the grammar, merge_files' children: any path | existing: the synthetic
    # files that exist in the group's builds at that turn, so a build cannot fail a merge on a made-up name
    max_items: int = 4  # under the grammar, the most sources (children) a create_file (merge_files) names; the
    # one-file index teacher (`librarian_builder_index`) needs it to hold the largest group

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.content_executor not in EXECUTORS:
            raise ConfigError(f"rollout.content_executor must be one of {', '.join(EXECUTORS)}, "
                              f"got {self.content_executor!r}")
        if self.merge_children not in MERGE_CHILDREN:
            raise ConfigError(f"rollout.merge_children must be one of {', '.join(MERGE_CHILDREN)}, "
                              f"got {self.merge_children!r}")
        if self.max_items < 1:
            raise ConfigError(f"rollout.max_items must be >= 1, got {self.max_items}")
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
    corpora: list = field(default_factory=list)  # (corpus id, docs) pairs built in one episode batch instead of
    # the job's own corpus (the exam's and the warm-start gate's jobs): each `group_size` times, under the grammar
    # of its own paths; records come back corpus by corpus

    def parts(self) -> list[tuple[str, list]]:
        """The (corpus id, docs) this job builds."""
        return [(str(c), list(d)) for c, d in self.corpora] or [(self.corpus_id, self.docs)]


@dataclass
class RolloutRecord:
    """One build: its trajectory, the version that produced it, the frozen probe and final workspaces."""

    job_id: str
    corpus_id: str
    index: int
    trajectory: Any  # librarian.roles.Trajectory
    policy_version: int
    probes: dict[int, Snapshot]  # builder turn (1-based) -> the workspace frozen there
    final: Snapshot
    build_costs: list[float]  # actions per turn
    worker_pid: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.job_id, self.index)

    @property
    def group(self) -> str:
        """Its GRPO group: the builds of one corpus in one job (a job over several corpora holds one group each)."""
        return f"{self.job_id}/{self.corpus_id}"
