"""The researcher's config sections (`ResearchSearchConfig`, `ResearcherRolloutConfig`), jobs and records.

A `ResearchJob` is one question over one memory workspace at one step,
researched `group_size` times; the workspace travels as Arrow IPC bytes (or
a Ray object ref to them) with its content hash. Each episode comes back as a
`ResearchRecord`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from librarian.cluster.rollout_worker import RolloutConfig
from librarian.config import ConfigError
from librarian.roles.research_context import SEARCH_MODES
from librarian.roles.researcher_hints import HintInput


@dataclass
class ResearchSearchConfig:
    """The researcher's search during training: mode (hybrid = BM25 + dense) and the embedder."""

    mode: str = "hybrid"  # hybrid | bm25 | dense
    embedder: str = "hashing"  # minilm (bundled all-MiniLM-L6-v2) | hashing (fast, for CPU runs)
    snippet_chars: int = 160  # characters of a search hit's snippet (keeps CPU prompts short)

    def __post_init__(self) -> None:
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

    @property
    def group(self) -> str:
        """Its GRPO group: the job (its `group_size` episodes of one question)."""
        return self.job_id
