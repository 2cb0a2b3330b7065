"""Room to learn, per corpus: the flat store and the SFT teacher's build, each examined by the probe reader.

A corpus has *headroom* when the flat store misses its hidden questions
(U(F_0) < 1) and the scripted teacher's build answers them (U = 1): a build
can then gain, and the teacher shows that the gain is reachable within the
builder's budget. A corpus is *kept* (the keep set) when the flat store
already answers it: a build can only keep that answer or break it. Both are
checked here in this process, with no Ray: the teacher builds the corpus
through the same tools, content executor and grammar caps as the rollout
workers (`scripted_builds`), and the probe reader (`probe:` section) answers
on each store (`librarian.rewards.probe_exam.run_local`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from librarian.models import make_backend
from librarian.models.base import SamplingParams
from librarian.rewards.construction import exam_utility
from librarian.rewards.probe_exam import ExamRunner, ReaderSpec, run_local
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder, run_episodes
from librarian.roles.builder_task import build_task
from librarian.roles.content_executor import EXECUTOR_KEY, ExtractiveExecutor
from librarian.workspace import Workspace

FULL = 1.0 - 1e-9  # a utility at least this high answers every question (acc correctness, no costs)


@dataclass(frozen=True, slots=True)
class CorpusCheck:
    """A corpus's flat-store utility and the teacher build's, under the probe reader."""

    corpus_id: str
    flat: float
    scripted: float

    @property
    def headroom(self) -> bool:
        """The flat store misses and the teacher's build answers."""
        return self.flat < FULL <= self.scripted

    @property
    def answered(self) -> bool:
        """The flat store already answers (a keep-set corpus)."""
        return self.flat >= FULL


def reader_spec(probe: Any, seed: int = 0) -> ReaderSpec:
    """The probe section's reader as a `ReaderSpec` (greedy), for in-process exams."""
    return ReaderSpec(role=probe.role, backend=probe.backend, options=dict(probe.options), budget=probe.budget,
                      memory=probe.memory, max_new_tokens=probe.max_new_tokens, temperature=0.0, seed=seed,
                      read_sources=getattr(probe, "read_sources", False))


def scripted_builds(corpora: Sequence[Any], policy: str | Callable, budget: int, listing_lines: int,
                    max_items: int = 4, max_chars: int = 1200) -> list[tuple[Workspace, Any]]:
    """Each corpus built once by a scripted `policy` (a name or a callable) with the extractive content executor
    attached, as the rollout workers build it; (workspace, trajectory) pairs."""
    role = librarian_builder(budget=budget)
    spaces = [Workspace.from_documents(c.docs) for c in corpora]
    executor = ExtractiveExecutor(max_chars=max_chars)
    envs = [ToolEnv(role, ToolContext(ws, extra={EXECUTOR_KEY: executor}), build_task(ws, listing_lines))
            for ws in spaces]
    backend = make_backend("scripted", policy=policy)
    loop = LoopConfig(SamplingParams(max_new_tokens=4096, temperature=0.0), max_items=max_items)
    trajs = run_episodes(envs, backend, role, loop)
    return list(zip(spaces, trajs, strict=True))


def check_corpora(cfg: Any, corpora: Sequence[Any], runner: ExamRunner | None = None) -> dict[str, CorpusCheck]:
    """Corpus id -> its `CorpusCheck` under a `train_builder` config (probe reader, reward weights, SFT teacher,
    `exam.scripted_budget`, the rollout's listing and grammar caps)."""
    if not corpora:
        return {}
    runner = runner or ExamRunner(reader_spec(cfg.probe, cfg.seed))
    weights = cfg.reward.weights()
    built = scripted_builds(corpora, cfg.sft.teacher, cfg.exam.scripted_budget, cfg.rollout.listing_lines,
                            getattr(cfg.rollout, "max_items", 4))
    out = {}
    for c, (ws, _) in zip(corpora, built, strict=True):
        flat = exam_utility(run_local(Workspace.from_documents(c.docs), c.questions, runner.spec, runner=runner),
                            weights)
        scripted = exam_utility(run_local(ws, c.questions, runner.spec, runner=runner), weights)
        out[c.corpus_id] = CorpusCheck(c.corpus_id, flat, scripted)
    return out
