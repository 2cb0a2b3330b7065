"""The RL machinery both training recipes share (`train_builder`, `train_researcher`: `pipelines/builder/train.py`,
`pipelines/researcher/train.py`).

- `config`: `RLConfig` (run, `ray`, `rollout`, `learner`, `off_policy`, `sft`), validated when built;
- `session`: `RLSession`, the Ray side started in one place: Ray, the placement group, the learner (or
  learner group, `cluster.learner_start`), the rollout pool, the probe pool, weight sync; the learner driven
  through typed methods (`step`, `sft`, `save`, `load`, `publish`, ...);
- `task`: the task contract a recipe implements (`jobs`, `turn_rewards`, `metrics`, `rows`);
- `samples`: the stale filter, group advantages and flat-group filtering;
- `loop`: the step loop, synchronous or one step off-policy (`rollout.asynchronous`);
- `trainer`: `Trainer`, one run: tracking, warm start or resume, the loop, the common results.

Importing this package does not import Ray (it loads when a session starts); torch comes with the learner's
batch code `samples` uses.
"""

from librarian.rl.config import OffPolicyConfig, RLConfig, SFTConfig, check
from librarian.rl.task import Scored, Task, job_seed, rotation
from librarian.rl.trainer import Trainer

__all__ = ["OffPolicyConfig", "RLConfig", "SFTConfig", "Scored", "Task", "Trainer", "check", "job_seed", "rotation"]
