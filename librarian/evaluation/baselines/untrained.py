"""The untrained-builder baseline: the Librarian builder role driven by a policy nobody trained.

One builder episode (create_file / merge_files / delete / list / read /
stop, `librarian.roles.librarian_builder`) over a copy of the flat store,
with any policy backend: `hf` with the bundled SmolLM2-135M-Instruct by
default, the tiny randomly initialised model in tests. Its tool calls go
through the same tools and validation as a trained builder's, so a
malformed or invalid call costs an action and changes nothing: the store
may gain few or no files, which is the point of the baseline (paper 000's
untrained starting point). A `create_file` without text is written by the
extractive content executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.evaluation.baselines.common import BaselineError, BuildResult, written_tokens
from librarian.models import make_backend
from librarian.models.base import SamplingParams
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder, run_episode
from librarian.roles.builder_task import build_task
from librarian.roles.content_executor import EXECUTOR_KEY, ExtractiveExecutor
from librarian.workspace import Workspace


@dataclass(frozen=True, slots=True)
class UntrainedBuilderOptions:
    """The policy backend and its options, the episode's action budget, sampling."""

    backend: str = "hf"
    backend_args: dict[str, Any] = field(default_factory=lambda: {"model": "smollm2"})
    budget: int = 40
    max_new_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0


def build_untrained_builder(ws: Workspace, options: UntrainedBuilderOptions | None = None) -> BuildResult:
    """A copy of `ws` changed only by the ops the builder episode applied (its trace)."""
    options = options or UntrainedBuilderOptions()
    if options.budget < 1 or options.max_new_tokens < 1:
        raise BaselineError(f"untrained_builder: budget and max_new_tokens must be >= 1, got {options.budget}, "
                            f"{options.max_new_tokens}")
    backend = make_backend(options.backend, **dict(options.backend_args))
    out = ws.copy()
    role = librarian_builder(budget=options.budget)
    env = ToolEnv(role, ToolContext(out, extra={EXECUTOR_KEY: ExtractiveExecutor()}), build_task(out))
    params = SamplingParams(max_new_tokens=options.max_new_tokens, temperature=options.temperature,
                            seed=options.seed)
    traj = run_episode(env, backend, role, LoopConfig(params))
    generated = sum(len(t.response_ids) for t in traj.turns)
    errors = sum(len(t.errors) for t in traj.turns)
    cost = traj.est_tokens_read + generated + written_tokens(e.op for e in out.trace)
    return BuildResult("untrained_builder", out, len(out.trace), cost,
                       {"backend": getattr(backend, "name", options.backend), "actions": traj.actions,
                        "turns": len(traj.turns), "tool_errors": errors, "end": traj.end,
                        "tokens_generated": generated})
