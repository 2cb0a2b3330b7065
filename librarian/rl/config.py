"""The config every RL recipe shares (OmegaConf dataclasses), validated when it is built.

`RLConfig` holds the run (output, steps, seed, resume, checkpoints, MLflow)
and the sections the trainer reads: `ray`, `rollout`, `learner`, `off_policy`
and `sft`. A recipe's config subclasses it, narrowing `rollout` and `sft` to
its own sections and adding the rest (data, rewards, evaluation). Every
section checks its own fields in `__post_init__` and `RLConfig.check` the
settings that span sections, so `load_config` (which builds the dataclasses)
fails on a bad estimator name or temperature before Ray starts. A GPU learner
is also checked against its GPU's memory (`planning.memory_check`, the estimate
`librarian plan` prints), and a colocated layout (`rollout.colocate`) against
what sharing one GPU needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from librarian.cluster.rollout_worker import RolloutConfig
from librarian.cluster.topology import RayConfig, Resources, check_engine_gpus, check_engine_start
from librarian.cluster.topology import check as check_topology
from librarian.config import ConfigError
from librarian.learner.config import ADVANTAGES, LearnerConfig
from librarian.planning.memory_check import check_learner

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
    eps: float = 0.0  # SFT's AdamW epsilon; 0: learner.eps (so a GRPO-only eps leaves the warm start as it was)
    init_from: str = ""  # an earlier run's saved warm start (its out_dir/checkpoints/sft): load it, skip SFT

    def __post_init__(self) -> None:
        if self.budget < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ConfigError(f"sft.budget, sft.epochs and sft.batch_size must be >= 1, got {self.budget}, "
                              f"{self.epochs}, {self.batch_size}")
        if not self.lr >= 0:
            raise ConfigError(f"sft.lr must be >= 0 (0: learner.lr), got {self.lr}")
        if not self.eps >= 0:
            raise ConfigError(f"sft.eps must be >= 0 (0: learner.eps), got {self.eps}")
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
        r, learner = self.rollout, self.learner
        if self.steps < 0 or self.checkpoint_every < 0:
            raise ConfigError(f"steps and checkpoint_every must be >= 0, got {self.steps}, {self.checkpoint_every}")
        if not r.temperature > 0:
            raise ConfigError(f"rollout.temperature must be > 0 for GRPO sampling, got {r.temperature}")
        if abs(learner.temperature - r.temperature) > 1e-9:
            raise ConfigError(f"learner.temperature ({learner.temperature}) must equal rollout.temperature "
                              f"({r.temperature}): log-probs are taken at the sampling temperature")
        if learner.advantage not in ADVANTAGES:
            raise ConfigError(f"learner.advantage must be one of {', '.join(ADVANTAGES)}, got {learner.advantage!r}")
        if learner.batch_size < 1 or learner.group_size < 1:
            raise ConfigError(f"learner.batch_size and learner.group_size must be >= 1, got {learner.batch_size}, "
                              f"{learner.group_size}")
        if r.asynchronous and self.off_policy.stale == "drop" and self.off_policy.max_staleness < 1:
            raise ConfigError("rollout.asynchronous trains on rollouts one update old: off_policy.max_staleness "
                              "must be >= 1 (or off_policy.stale=keep)")
        check_topology(self.ray, Resources(r.cpus_per_worker, r.gpus_per_worker), r.workers)
        check_engine_gpus("rollout", r.backend, r.options, r.gpus_per_worker)
        check_engine_start("rollout", r.backend, r.options, r.start_timeout_s)
        check_sync(r, learner)
        check_colocated(self.ray, r, learner)
        model = str(r.options.get("model", "smollm2"))  # the learner trains the rollout backend's model
        engine = dict(r.options) if r.colocate and r.backend == "vllm" and self.ray.learner_gpus > 0 else None
        check_learner(learner, model, int(r.options.get("max_model_len", 2048)), self.ray.address, engine)


def check_sync(r: RolloutConfig, learner: LearnerConfig) -> None:
    """The weight sync's own keys: its timeout, and CUDA IPC only where it can open (one GPU, one sender)."""
    if not r.sync_timeout_s >= 0:
        raise ConfigError(f"rollout.sync_timeout_s must be >= 0 (0: no limit), got {r.sync_timeout_s}")
    lora_payloads = learner.lora.enabled and learner.lora.publish == "adapter"
    if r.backend == "vllm" and lora_payloads and not r.options.get("enable_lora"):
        raise ConfigError("the learner publishes LoRA adapters (learner.lora.publish=adapter) but the vLLM engines "
                          "start without LoRA: set rollout.options.enable_lora=true, or learner.lora.publish=merged "
                          "(full weights with the adapter folded in; faster on CPU)")
    if r.backend != "vllm" or r.options.get("weight_transfer") != "ipc" or learner.lora.enabled:
        return
    if not r.colocate:
        raise ConfigError("rollout.options.weight_transfer=ipc hands the engine CUDA IPC handles of the learner's "
                          "GPU tensors, which open on the learner's own GPU only: set rollout.colocate=true (or use "
                          "weight_transfer nccl or file)")
    if learner.workers > 1:
        raise ConfigError(f"rollout.options.weight_transfer=ipc publishes learner rank 0's GPU tensors, which only "
                          f"rollout worker 0 shares a GPU with (learner.workers={learner.workers}): use "
                          "weight_transfer file, or learner.workers=1")


def check_colocated(ray: RayConfig, r: RolloutConfig, learner: LearnerConfig) -> None:
    """`rollout.colocate`: learner rank i and rollout worker i share bundle i's GPU; the engine sleeps while the
    learner updates, so nothing may sample then."""
    if r.sleep_level not in (1, 2):
        raise ConfigError(f"rollout.sleep_level must be 1 (offload the engine's weights to CPU memory) or 2 (drop "
                          f"them), got {r.sleep_level}")
    if not r.colocate:
        return
    if r.workers != learner.workers:
        raise ConfigError(f"rollout.colocate pairs learner rank i with rollout worker i on one GPU: rollout.workers "
                          f"({r.workers}) must equal learner.workers ({learner.workers})")
    if ray.learner_gpus != r.gpus_per_worker or ray.learner_gpus not in (0, 1):
        raise ConfigError(f"rollout.colocate shares one GPU per pair: ray.learner_gpus ({ray.learner_gpus:g}) and "
                          f"rollout.gpus_per_worker ({r.gpus_per_worker:g}) must both be 1 (or both 0 on CPU)")
    if not ray.placement_group:
        raise ConfigError("rollout.colocate needs ray.placement_group=true: the pairs share placement-group bundles")
    if r.asynchronous:
        raise ConfigError("rollout.colocate and rollout.asynchronous exclude each other: the engine sleeps while "
                          "the learner updates, so no rollout can run meanwhile")
    if r.sleep_level == 2 and learner.lora.enabled:
        raise ConfigError("rollout.sleep_level=2 drops the engine's base weights, which a LoRA adapter does not "
                          "restore: use sleep_level 1 with learner.lora.enabled=true")
    if r.backend != "vllm":
        return
    if r.options.get("weight_transfer") == "nccl" and not learner.lora.enabled:
        raise ConfigError("rollout.colocate with weight_transfer nccl: NCCL refuses two ranks of one group on one "
                          "GPU; use weight_transfer ipc (CUDA IPC on the shared GPU) or file")
    kwargs = dict(r.options.get("engine_kwargs") or {})
    if ray.learner_gpus > 0 and not kwargs.get("enable_sleep_mode"):
        raise ConfigError("rollout.colocate on a GPU needs rollout.options.engine_kwargs.enable_sleep_mode=true: the "
                          "engine frees its memory (LLM.sleep) while the learner updates")


def check(cfg: RLConfig) -> None:
    """Check `cfg` again (after fields were changed in place); raises `ConfigError` naming the setting."""
    cfg.check()
