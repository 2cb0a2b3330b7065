"""The RL machinery both training recipes share (`train_builder`, `train_researcher`: `pipelines/builder/train.py`,
`pipelines/researcher/train.py`).

- `config`: `RLConfig` (run, `ray`, `rollout`, `learner`, `off_policy`, `sft`), validated when built;
- `session`: `RLSession`, the Ray side started in one place: Ray, the placement group, the learner (or
  learner group, `cluster.learner_start`), the rollout pool, the probes (`Probes`, chosen once), weight sync; all
  of it driven through typed methods (`rollout`, `probe`, `step`, `sft`, `save`, `load`, `publish`, ...);
- `protocols`: what the loop and the recipes need of a session (`StepSession`, `RolloutSession`, `ExamSession`),
  so a test can pass a recording session;
- `task`: the task contract a recipe implements (`jobs`, `turn_rewards`, `metrics`, `rows`);
- `samples`: the stale filter, group advantages and flat-group filtering;
- `loop`: the step loop, synchronous or one step off-policy (`rollout.asynchronous`);
- `trainer`: `Trainer`, one run: tracking, warm start or resume, the loop, the common results.

Importing this package imports neither Ray nor torch: `Trainer` (and with it the loop, the session and the
learner's tensor code) loads on first use, as `librarian.learner`'s torch-backed names do, so a recipe's config
and `librarian plan` stay light.
"""

from __future__ import annotations

import importlib
from typing import Any

from librarian.rl.config import OffPolicyConfig, RLConfig, SFTConfig, check
from librarian.rl.task import Scored, Task, job_seed, rotation

_ON_FIRST_USE = {"Trainer": "librarian.rl.trainer"}  # name -> the module that defines it (imports torch)


def __getattr__(name: str) -> Any:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
    globals()[name] = value
    return value


__all__ = ["OffPolicyConfig", "RLConfig", "SFTConfig", "Scored", "Task", "Trainer", "check", "job_seed", "rotation"]
