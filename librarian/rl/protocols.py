"""What the step loop and the recipes need of a session: typed methods only, so a test can pass a recording
session where a run passes `RLSession` (the Ray side).

- `RolloutSession`: the latest published policy version and jobs run on the rollout workers;
- `ExamSession`: that, plus a frozen workspace probed by the run's answerer probe (the builder's exam);
- `StepSession`: that, plus what one RL step does (rollouts on weights captured before an update, the update,
  the publish, checkpoints).

`WeightsBox` is how the rollout workers find published weights: a list holding the object store reference of
the latest payload (or broadcast note), empty before the first publish. `published()` hands out a copy, so
rollouts started before an update (one step ahead) keep the weights they started on.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from librarian.datasets.records import Question
    from librarian.learner.batch import PolicySample
    from librarian.rewards.probe_exam import ExamResult
    from librarian.workspace.snapshot import Snapshot

WeightsBox = list[Any]


class RolloutSession(Protocol):
    """Rollouts: every job's records by job id (each job's records in group order)."""

    @property
    def version(self) -> int:
        """The latest published policy version (-1 before the first publish)."""
        ...

    def rollout(self, jobs: Sequence[Any], weights: WeightsBox | None = None) -> dict[str, list[Any]]:
        """Run `jobs` on the rollout workers, each worker first loading `weights` (default: the latest published)
        when a job needs a newer version than it holds."""
        ...


class ExamSession(RolloutSession, Protocol):
    def probe(self, snapshot: Snapshot, questions: Sequence[Question], repeats: int = 1) -> list[ExamResult]:
        """The answerer probe's graded answers to `questions` on the frozen workspace `snapshot`."""
        ...


class StepSession(RolloutSession, Protocol):
    """What `rl.loop.run_steps` drives."""

    @property
    def rollout_failures(self) -> int:
        """Rollout worker deaths seen so far (their jobs were redone)."""
        ...

    def published(self) -> WeightsBox:
        """The latest published weights as the workers fetch them (a copy)."""
        ...

    def stop_rollouts(self) -> None:
        """Abandon rollouts still running (the loop failed): their workers stop."""
        ...

    def step(self, samples: Sequence[PolicySample]) -> dict[str, float]:
        """One update on `samples`; the learner's metrics."""
        ...

    def publish(self) -> int:
        """The learner's current weights to the rollout workers; their version."""
        ...

    def save(self, folder: str | Path, extra: dict | None = None) -> str:
        """A learner checkpoint in `folder` with `extra`; the folder written."""
        ...

    def trainable_norm(self) -> float:
        """The L2 norm of the learner's trainable weights."""
        ...
