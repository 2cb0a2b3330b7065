"""The config every RL recipe shares (OmegaConf dataclasses), validated when it is built.

`RLConfig` holds the run (output, steps, seed, resume, checkpoints, MLflow)
and the sections the trainer reads: `ray`, `rollout`, `learner`, `off_policy`
and `sft`. A recipe's config subclasses it, narrowing `rollout` and `sft` to
its own sections and adding the rest (data, rewards, evaluation). Every
section checks its own fields in `__post_init__` and `RLConfig.check` the
settings that span sections, so `load_config` (which builds the dataclasses)
fails on a bad estimator name or temperature before Ray starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from librarian.cluster.rollout_worker import RolloutConfig
from librarian.cluster.topology import RayConfig, Resources, check_engine_gpus, check_engine_start
from librarian.cluster.topology import check as check_topology
from librarian.config import ConfigError
from librarian.learner.config import LearnerConfig

STALE = ("drop", "keep")


@dataclass
class OffPolicyConfig:
    """Trajectories more than `max_staleness` updates behind the learner are dropped (`drop`) or kept."""

    max_staleness: int = 1
    stale: str = "drop"

    def __post_init__(self) -> None:
        if self.stale not in STALE or self.max_staleness < 0:
            raise ConfigError(f"off_policy needs stale in {'/'.join(STALE)} and max_staleness >= 0, got "
                              f"stale={self.stale!r}, max_staleness={self.max_staleness}")


@dataclass
class SFTConfig:
    """Warm start: SFT on a scripted teacher's verified episodes (a recipe adds how they are chosen)."""

    enabled: bool = True
    teacher: str = "librarian_builder"
    budget: int = 12  # the teacher's actions or rounds per episode
    epochs: int = 1
    batch_size: int = 4
    lr: float = 0.0  # SFT's learning rate; 0: learner.lr (a control run sets learner.lr=0 and keeps SFT's)
    init_from: str = ""  # an earlier run's saved warm start (its out_dir/checkpoints/sft): load it, skip SFT

    def __post_init__(self) -> None:
        if self.budget < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ConfigError(f"sft.budget, sft.epochs and sft.batch_size must be >= 1, got {self.budget}, "
                              f"{self.epochs}, {self.batch_size}")
        if not self.lr >= 0:
            raise ConfigError(f"sft.lr must be >= 0 (0: learner.lr), got {self.lr}")
        if self.init_from and not self.enabled:
            raise ConfigError(f"sft.init_from={self.init_from} with sft.enabled=false: the saved warm start would be "
                              f"ignored; set sft.enabled=true to load it")


@dataclass
class RLConfig:
    """What every RL recipe runs on; override any field as key=value."""

    out_dir: str = "build/rl"
    steps: int = 10
    seed: int = 0
    resume: str = ""  # a checkpoint folder (out_dir/checkpoints/step_N) to continue from
    checkpoint_every: int = 1  # 0: no checkpoints
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else the pipeline's name)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir)
    save_trajectories: bool = True
    ray: RayConfig = field(default_factory=RayConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise `ConfigError` naming the first inconsistent setting (sections check their own fields)."""
        from librarian.learner.advantages import ESTIMATORS

        r, learner = self.rollout, self.learner
        if self.steps < 0 or self.checkpoint_every < 0:
            raise ConfigError(f"steps and checkpoint_every must be >= 0, got {self.steps}, {self.checkpoint_every}")
        if not r.temperature > 0:
            raise ConfigError(f"rollout.temperature must be > 0 for GRPO sampling, got {r.temperature}")
        if abs(learner.temperature - r.temperature) > 1e-9:
            raise ConfigError(f"learner.temperature ({learner.temperature}) must equal rollout.temperature "
                              f"({r.temperature}): log-probs are taken at the sampling temperature")
        if learner.advantage not in ESTIMATORS:
            raise ConfigError(f"learner.advantage must be one of {', '.join(ESTIMATORS)}, got {learner.advantage!r}")
        if learner.batch_size < 1 or learner.group_size < 1:
            raise ConfigError(f"learner.batch_size and learner.group_size must be >= 1, got {learner.batch_size}, "
                              f"{learner.group_size}")
        if r.asynchronous and self.off_policy.stale == "drop" and self.off_policy.max_staleness < 1:
            raise ConfigError("rollout.asynchronous trains on rollouts one update old: off_policy.max_staleness "
                              "must be >= 1 (or off_policy.stale=keep)")
        check_topology(self.ray, Resources(r.cpus_per_worker, r.gpus_per_worker), r.workers)
        check_engine_gpus("rollout", r.backend, r.options, r.gpus_per_worker)
        check_engine_start("rollout", r.backend, r.options, r.start_timeout_s)


def check(cfg: RLConfig) -> None:
    """Check `cfg` again (after fields were changed in place); raises `ConfigError` naming the setting."""
    cfg.check()
