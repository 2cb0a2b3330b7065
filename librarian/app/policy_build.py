"""The `policy` builder: the Librarian builder role (create_file, merge_files, delete, stop) run by any backend.

One episode over the whole workspace, within the role's action budget. The
trace of applied ops is the checkpoint: a resumed build replays it and
continues with the actions left (`state["actions"]` records those spent).
Costs come from the trajectory: model calls (turns) and tokens generated
(response tokens, for backends that have them).

Beyond one context window, an LLM builder scales by clustering first (paper
000, §4): documents are grouped (for example by the `entities` builder's
keys, or by embedding clusters) and one episode runs per cluster, each seeing
only its cluster's folder; see docs/using.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from librarian.app.corpus import InputError
from librarian.models import make_backend
from librarian.models.base import BackendError, SamplingParams
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder, run_episode
from librarian.roles.builder_task import build_task
from librarian.workspace import Workspace


@dataclass
class PolicyCost:
    """What the episode cost: model calls, tokens generated, actions spent."""

    model_calls: int = 0
    tokens_generated: int = 0
    actions: int = 0


def run_policy_build(ws: Workspace, backend_name: str, backend_args: dict[str, Any], budget: int,
                     actions_spent: int = 0, max_new_tokens: int = 256) -> PolicyCost:
    """Run the builder role on `ws` (changed in place) with the actions left; returns the cost."""
    left = budget - actions_spent
    if left < 1:
        return PolicyCost(actions=actions_spent)

    if backend_name == "scripted" and "policy" not in backend_args:
        backend_args = {**backend_args, "policy": "librarian_builder"}
    try:
        backend = make_backend(backend_name, **backend_args)
    except (BackendError, ValueError, ImportError) as exc:
        raise InputError(f"cannot make the {backend_name!r} builder backend: {exc}") from None
    role = librarian_builder(budget=left)
    env = ToolEnv(role, ToolContext(ws), build_task(ws))
    traj = run_episode(env, backend, role, LoopConfig(SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)))
    return PolicyCost(model_calls=len(traj.turns), tokens_generated=sum(len(t.response_ids) for t in traj.turns),
                      actions=actions_spent + traj.actions)
