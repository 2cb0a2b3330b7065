"""`ProbingEnv`: a builder environment that freezes its workspace at probe turns and adds training hints.

Its rewards leave it as its `outcome()` (the environment contract's way): a
`BuildOutcome`, the workspace frozen at each probe turn and at the end
(`workspace.snapshot.Snapshot`s, hashed where they are encoded), which the
answerer probe turns into rewards on the driver. Hints come from a function
of the calls so far and the turn (the builder's hint generator), every
`hint_every` turns of a training rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from librarian.roles.environment import Environment, Reset, Step
from librarian.workspace import Workspace, codec
from librarian.workspace.snapshot import Snapshot, freeze

Hint = Callable[[list[dict], int], "str | None"]  # (calls so far, turn) -> a hint, or None


class Schedule(Protocol):
    def should_probe(self, turn: int, probes_done: int) -> bool: ...


def snapshot(workspace: Workspace) -> bytes:
    """A workspace as Arrow IPC stream bytes (what travels to a probe or a worker; `freeze` adds its hash)."""
    return codec.table_to_ipc_bytes(workspace.to_table())


@dataclass(frozen=True)
class BuildOutcome:
    """What a build leaves for its rewards: the workspace at each probe turn (1-based) and at the end."""

    probes: dict[int, Snapshot]
    final: Snapshot


class ProbingEnv:
    """Wraps a builder env: freezes `workspace` when `schedule` says so and appends `hint(calls, turn)` every
    `hint_every` turns (none without a `hint`)."""

    def __init__(self, env: Environment, workspace: Workspace, schedule: Schedule, hint_every: int = 0,
                 hint: Hint | None = None) -> None:
        self.env = env
        self.workspace = workspace
        self.schedule = schedule
        self.hint_every = hint_every if hint is not None else 0
        self.hint = hint
        self.turn = 0
        self.calls: list[dict] = []
        self.probes: dict[int, Snapshot] = {}

    def reset(self) -> Reset:
        return self.env.reset()

    def answer_tools(self) -> Any:
        return self.env.answer_tools()

    def final_answer(self, text: str) -> Any:
        return self.env.final_answer(text)

    def outcome(self) -> BuildOutcome:
        """The probe turns' snapshots and the final workspace, frozen now (call it once the episode is over)."""
        return BuildOutcome(dict(self.probes), freeze(self.workspace))

    def step(self, text: str, actions_left: int) -> Step:
        step = self.env.step(text, actions_left)
        self.turn += 1
        self.calls.extend({"name": c.name, "arguments": c.arguments} for c in step.calls)
        if self.schedule.should_probe(self.turn, len(self.probes)):
            self.probes[self.turn] = freeze(self.workspace)
        if self.hint is not None and self.hint_every and self.turn % self.hint_every == 0 and not step.terminated:
            hint = self.hint(self.calls, self.turn)
            if hint:
                step = replace(step, observation=f"{step.observation}\n\n{hint}")
        return step
