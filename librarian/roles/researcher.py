"""Running the JAM researcher: a round-budgeted environment and one call that researches a request.

`ResearchEnv` is a `ToolEnv` for the `jam_researcher` role whose budget is
counted in rounds (paper 002: up to 20 think-explore-reflect rounds): a
message with up to `max_calls_per_turn` calls costs one round, and within a
round every call runs. When the rounds run out, the loop forces a
`finalize` (the best-effort context). `research(...)` runs it and returns
the trajectory with its `Finalized` context and raw sources.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from librarian.models.base import PolicyBackend, SamplingParams
from librarian.roles.definitions import Role, jam_researcher
from librarian.roles.environment import Reset, Step, ToolEnv
from librarian.roles.episode import LoopConfig, run_episodes
from librarian.roles.researcher_tools import Finalized, finalized
from librarian.roles.tools import ToolContext
from librarian.roles.trajectory import Trajectory


class ResearchEnv(ToolEnv):
    """The researcher's tools over a workspace; one action per round, however many calls it held."""

    def reset(self) -> Reset:
        opening = super().reset()
        opening.messages[1]["content"] = f"Request: {self.task}"
        return opening

    def step(self, text: str, actions_left: int) -> Step:
        step = super().step(text, self.role.max_calls_per_turn if actions_left > 0 else 0)
        return replace(step, actions=1 if actions_left > 0 else 0,
                       info={**step.info, "calls": len(step.calls), "call_actions": step.actions})


@dataclass(frozen=True, slots=True)
class Research:
    """One researched request: its trajectory and its final context."""

    trajectory: Trajectory
    result: Finalized

    @property
    def rounds(self) -> int:
        return sum(1 for t in self.trajectory.turns if not t.forced)


def research(contexts: list[ToolContext], requests: list[str], backend: PolicyBackend, role: Role | None = None,
             config: LoopConfig | None = None) -> list[Research]:
    """Research each request over its context (batched); the result carries the context and raw sources."""
    if len(contexts) != len(requests):
        raise ValueError(f"research got {len(contexts)} contexts for {len(requests)} requests")
    role = role or jam_researcher()
    config = config or LoopConfig(params=SamplingParams(max_new_tokens=512, temperature=0.0))
    envs = [ResearchEnv(role, ctx, req) for ctx, req in zip(contexts, requests, strict=True)]
    trajs = run_episodes(envs, backend, role, config)
    return [Research(t, finalized(t.answer)) for t in trajs]
