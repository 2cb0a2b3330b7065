"""The learner's structured config (OmegaConf-ready dataclasses); defaults follow paper 000 A.7."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from librarian.learner.errors import LearnerError

AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+", "k1+", "low_var_kl+")
ENGINES = ("torch", "deepspeed")
PRECISIONS = ("fp32", "bf16")
ROLLOUT_IS = ("none", "token", "sequence")
LORA_PUBLISH = ("adapter", "merged")
ADVANTAGES = ("outcome_grpo", "multi_turn_grpo")  # `advantage`: the turn-level estimators (advantages.ESTIMATORS)


@dataclass
class LoraConfig:
    """LoRA via peft; `enabled=False` trains (and publishes) the full weights."""

    enabled: bool = True
    rank: int = 32
    alpha: int = 64
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    publish: str = "adapter"  # adapter: rollout engines load the LoRA adapter | merged: they get full weights with
    # the adapter folded in (W + alpha/rank * B A), so they run without LoRA (vLLM's CPU LoRA kernels decode ~2.5x
    # slower than the plain model)

    def shape(self) -> dict[str, object]:
        """The fields that shape the weights (what a checkpoint must match); `publish` only says how they travel."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "publish"}


@dataclass
class LossConfig:
    """Policy loss (a verl registry name), clipping, aggregation, KL to the reference, entropy bonus."""

    policy_loss: str = "vanilla"
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0
    agg_mode: str = "token-mean"
    kl_coef: float = 0.0
    kl_type: str = "low_var_kl"
    entropy_coef: float = 0.0
    rollout_is: str = "none"  # token | sequence: truncated importance sampling against the rollout log-probs
    # (verl's rollout correction, REINFORCE weighted by min(pi / pi_rollout, threshold)) for stale samples
    rollout_is_threshold: float = 2.0


@dataclass
class DeepSpeedConfig:
    """ZeRO stage and optimizer choice for the `deepspeed` engine."""

    zero_stage: int = 2
    cpu_adam: bool = False  # False: a torch AdamW under DeepSpeed (no JIT compile of cpu_adam)
    offload_optimizer: bool = False


@dataclass
class LearnerConfig:
    """Everything the learner needs; `batch_size` trajectories x `group_size` per step in paper 000."""

    engine: str = "torch"
    lr: float = 4e-5
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8  # AdamW's epsilon. Adam's early steps move every weight by about the learning rate whatever
    # its gradient (a sign); an eps well above the weights' typical gradient makes a small, noisy gradient give a
    # small step (SGD-like at lr / eps) while a large, consistent one keeps Adam's step
    max_grad_norm: float = 1.0
    grad_accum: int = 1  # micro-batches per optimizer step (at most: never more than the samples)
    max_tokens_per_micro_batch: int = 0  # > 0: micro-batches by token budget instead of grad_accum (verl's
    # dynamic batch size): rows x longest row <= this; a longer sequence is a micro-batch of its own
    shared_prefix: int = 0  # > 0: samples that open with at least this many equal tokens (a GRPO group's prompt)
    # run that opening through the model once per update, not once per sample, and once more under the KL
    # reference when kl_coef > 0 (torch engine, no gradient checkpointing; learner/shared_prefix.py)
    logprob_chunk: int = 1024  # trained positions projected to the vocabulary at a time (0: the whole batch)
    precision: str = "fp32"  # fp32 | bf16: bfloat16 compute with float32 master weights (DeepSpeed's bf16
    # section; the torch engine: autocast over float32 trainable parameters)
    temperature: float = 1.0  # the rollout sampling temperature: logits are divided by it
    advantage: str = "multi_turn_grpo"  # one of ADVANTAGES
    gamma: float = 1.0
    scale_by_std: bool = True
    filter_flat_groups: bool = False  # train only on groups whose advantages are not all zero (DAPO's
    # dynamic sampling without refill): a step whose groups are all flat skips the update
    batch_size: int = 8
    group_size: int = 4
    seed: int = 0
    device: str = "cpu"
    workers: int = 1  # data-parallel learner ranks (Ray actors, one per GPU or CPU slot); 1: one process, no group
    gradient_checkpointing: bool = False  # recompute activations in backward: far less memory on long sequences
    call_timeout_s: float = 7200.0  # the driver's wait for one learner call (a step, a save or load; SFT: per
    # SFT step); past it the call fails naming it (0: no limit)
    gpu_memory_gib: float = 0.0  # one learner GPU's memory, for the config's memory check (0: this machine's GPU
    # when the run starts Ray here, else the largest GPU the estimate knows)
    lora: LoraConfig = field(default_factory=LoraConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)

    def __post_init__(self) -> None:
        validate(self)


def validate(cfg: LearnerConfig) -> LearnerConfig:
    """Raise `LearnerError` naming the first bad field."""
    if cfg.engine not in ENGINES:
        raise LearnerError(f"learner.engine must be one of {', '.join(ENGINES)}, got {cfg.engine!r}")
    if not cfg.lr >= 0:  # 0 is the control run of a learning benchmark: everything runs, nothing moves
        raise LearnerError(f"learner.lr must be >= 0, got {cfg.lr}")
    if not cfg.eps > 0:
        raise LearnerError(f"learner.eps must be > 0 (AdamW's epsilon), got {cfg.eps}")
    if cfg.workers < 1:
        raise LearnerError(f"learner.workers must be >= 1, got {cfg.workers}")
    if cfg.grad_accum < 1:
        raise LearnerError(f"learner.grad_accum must be >= 1, got {cfg.grad_accum}")
    if cfg.max_tokens_per_micro_batch < 0 or cfg.logprob_chunk < 0:
        raise LearnerError("learner.max_tokens_per_micro_batch and learner.logprob_chunk must be >= 0 (0: off), "
                           f"got {cfg.max_tokens_per_micro_batch}, {cfg.logprob_chunk}")
    if not cfg.call_timeout_s >= 0 or not cfg.gpu_memory_gib >= 0:
        raise LearnerError(f"learner.call_timeout_s and learner.gpu_memory_gib must be >= 0 (0: no limit, unknown), "
                           f"got {cfg.call_timeout_s}, {cfg.gpu_memory_gib}")
    if cfg.precision not in PRECISIONS:
        raise LearnerError(f"learner.precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}")
    if not cfg.temperature > 0:
        raise LearnerError(f"learner.temperature must be > 0, got {cfg.temperature}")
    if not 0 < cfg.gamma <= 1:
        raise LearnerError(f"learner.gamma must be in (0, 1], got {cfg.gamma}")
    if cfg.lora.publish not in LORA_PUBLISH:
        raise LearnerError(f"learner.lora.publish must be one of {', '.join(LORA_PUBLISH)}, got {cfg.lora.publish!r}")
    if cfg.lora.enabled and cfg.lora.publish == "merged" and cfg.engine == "deepspeed" and \
            cfg.deepspeed.zero_stage == 3:
        raise LearnerError("learner.lora.publish=merged needs the base weights whole on rank 0; ZeRO-3 partitions "
                           "them (use publish=adapter, or zero_stage <= 2)")
    if cfg.lora.enabled and (cfg.lora.rank < 1 or cfg.lora.alpha <= 0 or not cfg.lora.target_modules):
        raise LearnerError(f"learner.lora needs rank >= 1, alpha > 0 and target_modules, got {cfg.lora}")
    if cfg.loss.agg_mode not in AGG_MODES:
        raise LearnerError(f"learner.loss.agg_mode must be one of {', '.join(AGG_MODES)}, got {cfg.loss.agg_mode!r}")
    if cfg.loss.kl_type not in KL_TYPES:
        raise LearnerError(f"learner.loss.kl_type must be one of {', '.join(KL_TYPES)}, got {cfg.loss.kl_type!r}")
    if cfg.loss.rollout_is not in ROLLOUT_IS or not cfg.loss.rollout_is_threshold > 1:
        raise LearnerError(f"learner.loss.rollout_is must be one of {', '.join(ROLLOUT_IS)} and rollout_is_threshold "
                           f"> 1, got {cfg.loss.rollout_is!r}, {cfg.loss.rollout_is_threshold}")
    if cfg.loss.kl_coef < 0 or cfg.loss.clip_ratio <= 0 or cfg.loss.clip_ratio_c <= 1:
        raise LearnerError("learner.loss needs kl_coef >= 0, clip_ratio > 0 and clip_ratio_c > 1, "
                           f"got {cfg.loss}")
    if cfg.shared_prefix < 0:
        raise LearnerError(f"learner.shared_prefix must be >= 0 (0: off), got {cfg.shared_prefix}")
    if cfg.shared_prefix and (cfg.engine != "torch" or cfg.gradient_checkpointing):
        raise LearnerError("learner.shared_prefix needs learner.engine=torch and gradient_checkpointing=false, "
                           f"got engine={cfg.engine!r}, gradient_checkpointing={cfg.gradient_checkpointing}")
    if cfg.deepspeed.zero_stage not in (0, 1, 2, 3):
        raise LearnerError(f"learner.deepspeed.zero_stage must be 0-3, got {cfg.deepspeed.zero_stage}")
    return cfg
