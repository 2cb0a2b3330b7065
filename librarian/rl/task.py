"""The task contract: what a pipeline gives the RL step loop.

A task says which rollout jobs a step runs and what the rollouts earned:

    class Task(Protocol):
        def jobs(self, step, version): ...        # the step's jobs (deterministic in the seed and step)
        def turn_rewards(self, records): ...      # per record: a reward per turn with tokens, and its detail
        def metrics(self, scored): ...            # the step's task figures (reward, ...)
        def rows(self, scored, step): ...         # JSON rows for trajectories.jsonl

Records are a rollout worker's (`job_id`, `index`, `policy_version`,
`trajectory`, `group`); a GRPO group is a record's `group`: a job's `group_size` rollouts of one prompt
(a builder job over several corpora holds one group a corpus).
The loop does the rest: rollouts, the stale filter, advantages, the update,
the weight publish, metrics, checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


@dataclass
class Scored:
    """A step's records (job then group order), each with one reward per turn with tokens and the task's detail
    (the builder's `RolloutRewards`, the researcher's source recall)."""

    records: list[Any]
    turn_rewards: list[list[float]]
    details: list[Any]

    def subset(self, keep: Sequence[int]) -> Scored:
        return Scored([self.records[i] for i in keep], [self.turn_rewards[i] for i in keep],
                      [self.details[i] for i in keep])


class Task(Protocol):
    """What a recipe implements for the step loop (see the module docstring)."""

    def jobs(self, step: int, version: int) -> list[Any]:
        """Step `step`'s rollout jobs; `version`: the weights they need at least (the latest published)."""

    def turn_rewards(self, records: list[Any]) -> tuple[list[list[float]], list[Any]]:
        """Per record, a reward for each turn with tokens (turn order), and a detail for metrics and rows."""

    def metrics(self, scored: Scored) -> dict[str, float]:
        """The step's task figures; `reward` is the one the progress line shows."""

    def rows(self, scored: Scored, step: int) -> list[dict[str, Any]]:
        """JSON-able rows of the step's trajectories (the trajectories artifact)."""


def job_seed(seed: int, step: int, slot: int) -> int:
    """The sampling seed of job `slot` of step `step` (resume-exact: a function of the run seed and step only)."""
    return seed * 100_003 + step * 1009 + slot


def rotation(items: Sequence[T], step: int, batch: int) -> list[tuple[int, T]]:
    """Step `step`'s `batch` prompts, taken in rotation through `items`: (slot, item) pairs."""
    if not items:
        raise ValueError("a task needs at least one prompt to rotate through")
    return [(b, items[(step * batch + b) % len(items)]) for b in range(batch)]
