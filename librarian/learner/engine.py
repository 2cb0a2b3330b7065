"""The plain torch engine (CPU or one GPU): a model, its trainable parameters, AdamW, gradient clipping.

Every engine offers the same small surface, so the `Learner` does not care
which one it drives: `module` (call it for logits), `autocast()` (the context
forward passes run in), `backward(loss)` (any number of micro-batches),
`step() -> grad_norm`, `trainable_state()` / `load_trainable_state()` and
`optimizer_state()` / `load_optimizer_state()`.

Precision (`learner.precision`): `fp32` trains a float32 model; `bf16` runs
the forward and backward passes in bfloat16 under `torch.autocast` while the
trainable parameters, their gradients and AdamW's state stay float32 (the
master weights), so small updates (lr 1e-6 on weights of order 1) are not
rounded away as they are in pure bfloat16. Frozen weights (LoRA's base model)
keep the dtype they were loaded in.

Inside a torch.distributed process group of several ranks (a learner group,
`librarian.cluster.learner_group`) the torch engine is data-parallel: rank 0's
trainable parameters are broadcast at the start, and `step()` averages the
gradients over the ranks (flat buckets, all-reduce) before clipping, so every
rank applies the same update to the same replica. Each rank's loss is scaled
by the group size (verl's `dp_size` in `agg_loss`), so the average is the
gradient of the whole batch.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import lora
from librarian.learner.config import LearnerConfig

BUCKET = 1 << 24  # elements per all-reduce / broadcast bucket (64 MB of float32)


def data_parallel() -> tuple[int, int]:
    """(rank, world size) of the torch.distributed group this process belongs to; (0, 1) outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _buckets(tensors: list[torch.Tensor], size: int = BUCKET) -> list[list[torch.Tensor]]:
    """Consecutive groups of tensors of at most `size` elements each (a larger tensor is a group of its own)."""
    out: list[list[torch.Tensor]] = [[]]
    count = 0
    for t in tensors:
        if out[-1] and count + t.numel() > size:
            out.append([])
            count = 0
        out[-1].append(t)
        count += t.numel()
    return [b for b in out if b]


def collective(tensors: list[torch.Tensor], op: str) -> None:
    """In place over the group, bucket by bucket: `op` 'mean' (all-reduce, divided by the world size) or
    'broadcast' (rank 0's values)."""
    import torch.distributed as dist

    world = dist.get_world_size()
    for bucket in _buckets(tensors):
        flat = torch.cat([t.detach().reshape(-1) for t in bucket])
        if op == "mean":
            dist.all_reduce(flat)
            flat /= world
        else:
            dist.broadcast(flat, src=0)
        at = 0
        for t in bucket:
            t.detach().copy_(flat[at:at + t.numel()].view_as(t))
            at += t.numel()


def prepare_model(model: Any, cfg: LearnerConfig) -> Any:
    """`model` on `cfg.device` (float32 for `precision: fp32`), wrapped with LoRA when enabled, in train mode;
    the torch engine's trainable parameters are float32 master weights in either precision."""
    model = model.to(cfg.device)
    if cfg.precision == "fp32":
        model = model.float()
    if cfg.lora.enabled:
        model = lora.wrap(model, cfg.lora)
    if cfg.engine == "torch":
        for p in model.parameters():
            if p.requires_grad and p.dtype != torch.float32:
                p.data = p.data.float()
    model.train()
    return model


def autocast(cfg: LearnerConfig, device: torch.device) -> Any:
    """bfloat16 autocast for `precision: bf16` on the torch engine; otherwise nothing."""
    if cfg.precision == "bf16" and cfg.engine == "torch":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class TorchEngine:
    """AdamW over the trainable parameters; gradients accumulate until `step()`."""

    partitioned = False  # every rank holds the whole model (ZeRO-3 does not)

    def __init__(self, model: Any, cfg: LearnerConfig) -> None:
        self.cfg = cfg
        self.module = prepare_model(model, cfg)
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps,
                                           weight_decay=cfg.weight_decay)
        self.rank, self.world = data_parallel()
        if self.world > 1:  # every replica starts from rank 0's trainable weights
            collective(self.params, "broadcast")

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    equal_micro_batches = False  # gradients are averaged once, in `step`: ranks may run different counts

    def autocast(self) -> Any:
        return autocast(self.cfg, self.device)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        if self.world > 1:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            collective([p.grad for p in self.params], "mean")
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        if self.cfg.lora.enabled:
            return lora.adapter_state(self.module)
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        if self.cfg.lora.enabled:
            lora.load_adapter_state(self.module, state)
        else:
            self.module.load_state_dict(state)

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def set_step(self, lr: float, eps: float) -> None:
        """The learning rate and AdamW epsilon of every parameter group from now on."""
        for group in self.optimizer.param_groups:
            group.update(lr=float(lr), eps=float(eps))

    def apply_hyperparameters(self) -> None:
        """The config's lr, betas, eps and weight decay on every parameter group (a loaded optimizer state brings
        the ones it was saved with)."""
        c = self.cfg
        for opt in [self.optimizer]:
            for group in opt.param_groups:
                group.update(lr=float(c.lr), betas=tuple(c.betas), eps=float(c.eps), weight_decay=float(c.weight_decay))

    def reset_optimizer(self) -> None:
        """Forget the optimizer's moments (a new training stage starts from fresh AdamW state)."""
        self.optimizer.state.clear()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def save(self, folder: Any) -> None:
        """Engine-specific extra files (none for torch)."""

    def load(self, folder: Any) -> None:
        """Engine-specific extra files (none for torch)."""
