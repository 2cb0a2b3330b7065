"""The DeepSpeed ZeRO engine (stages 0-3) behind the torch engine's surface.

On GPUs it uses NCCL; on CPU DeepSpeed picks its CPU accelerator and gloo by
itself. A single process initialises a one-rank process group (rank 0,
world 1) unless one exists: a learner group (`librarian.cluster.learner_group`)
starts the process group of its ranks first, and DeepSpeed then partitions
the optimizer state (ZeRO-1/2) and the parameters (ZeRO-3) over them. Each
rank's loss is already scaled by the group size (verl's `dp_size`), so
DeepSpeed's gradient averaging gives the gradient of the whole batch.
The optimizer is a torch AdamW handed to DeepSpeed
(`zero_force_ds_cpu_optimizer: false`) unless `cpu_adam` is set, which
JIT-compiles DeepSpeed's `cpu_adam` (about 40 s the first time). JIT builds
go to `$TORCH_EXTENSIONS_DIR`, by default `build/torch_extensions`.

Accumulation is the caller's (`managed_gradient_accumulation: false`):
`backward` may run any number of micro-batches (a token budget makes their
number vary from step to step, an SFT epoch ends on a short batch) and
`step` is the boundary that finishes the reduction and updates. Under
ZeRO-2/3 every backward pass reduces (and ZeRO-3's forward passes gather)
over the ranks, so the ranks of a group run equally many
(`equal_micro_batches`; the learner evens them out). `precision: bf16` adds
DeepSpeed's `bf16` section: the module computes in bfloat16 and the ZeRO
optimizer keeps float32 master weights and AdamW states.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import lora
from librarian.learner.config import LearnerConfig
from librarian.learner.engine import prepare_model
from librarian.learner.errors import LearnerError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _init_distributed() -> None:
    import deepspeed
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", str(_free_port()))):
        os.environ.setdefault(key, value)
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")


def ds_config(cfg: LearnerConfig) -> dict[str, Any]:
    """The DeepSpeed config for `cfg`: the caller owns accumulation (any number of backward passes, then `step`);
    `precision: bf16` adds the `bf16` section (float32 master weights in the ZeRO optimizer)."""
    zero: dict[str, Any] = {"stage": cfg.deepspeed.zero_stage}
    if cfg.deepspeed.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    conf: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": cfg.max_grad_norm,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if cfg.precision == "bf16":
        conf["bf16"] = {"enabled": True}
    if cfg.deepspeed.cpu_adam:
        conf["optimizer"] = {"type": "AdamW", "params": {"lr": cfg.lr, "betas": list(cfg.betas), "eps": cfg.eps,
                                                         "weight_decay": cfg.weight_decay}}
    return conf


class DeepSpeedEngine:
    """A `deepspeed.initialize`d model; `backward` counts micro-batches, `step` ends the accumulation."""

    def __init__(self, model: Any, cfg: LearnerConfig) -> None:
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path("build/torch_extensions").resolve()))
        import deepspeed

        self.cfg = cfg
        _init_distributed()
        module = prepare_model(model, cfg)
        params = [p for p in module.parameters() if p.requires_grad]
        optimizer = None if cfg.deepspeed.cpu_adam else torch.optim.AdamW(
            params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)
        self.ds, self.optimizer, _, _ = deepspeed.initialize(model=module, optimizer=optimizer,
                                                             model_parameters=params, config=ds_config(cfg))
        self.module = self.ds
        self.partitioned = cfg.deepspeed.zero_stage == 3  # read or write the parameters on every rank together
        self.equal_micro_batches = cfg.deepspeed.zero_stage >= 2  # collectives in every forward/backward pass
        self._micro = 0

    @property
    def device(self) -> torch.device:
        return self.ds.device

    def autocast(self) -> Any:
        return contextlib.nullcontext()  # DeepSpeed's bf16 section casts the module itself

    def backward(self, loss: torch.Tensor) -> None:
        # the learner's micro-batch losses already add up to the batch loss: no 1/gas scaling
        self.ds.backward(loss, scale_wrt_gas=False)
        self._micro += 1

    def step(self) -> float:
        if not self._micro:
            raise LearnerError("deepspeed engine: step() without a backward pass")
        self.ds.step()  # the accumulation boundary: reduce (ZeRO-0/1) or finish the reduction (ZeRO-2/3), update
        self._micro = 0
        norm = self.ds.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def gathered_params(self, params: list[Any]) -> Any:
        """Read `params` whole inside (ZeRO-3 gathers them from every rank: all ranks enter together)."""
        import deepspeed

        if self.cfg.deepspeed.zero_stage == 3:
            return deepspeed.zero.GatheredParameters(params, modifier_rank=None)
        return contextlib.nullcontext()

    def _gathered(self) -> Any:
        import deepspeed

        if self.cfg.deepspeed.zero_stage == 3:
            return deepspeed.zero.GatheredParameters(list(self.ds.module.parameters()), modifier_rank=0)

        return contextlib.nullcontext()

    def trainable_state(self) -> dict[str, torch.Tensor]:
        with self._gathered():
            if self.cfg.lora.enabled:
                return lora.adapter_state(self.ds.module)
            return {k: v.detach().cpu().clone() for k, v in self.ds.module.state_dict().items()}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        with self._gathered():
            if self.cfg.lora.enabled:
                lora.load_adapter_state(self.ds.module, state)
            else:
                self.ds.module.load_state_dict(state)

    def set_step(self, lr: float, eps: float) -> None:
        """The learning rate and AdamW epsilon of every parameter group from now on (DeepSpeed's wrapper and the
        base optimizer)."""
        for opt in {id(o): o for o in (self.optimizer, getattr(self.optimizer, "optimizer", None)) if o}.values():
            for group in opt.param_groups:
                group.update(lr=float(lr), eps=float(eps))

    def apply_hyperparameters(self) -> None:
        """The config's lr, betas, eps and weight decay on every parameter group (a loaded optimizer state brings
        the ones it was saved with)."""
        c = self.cfg
        for opt in list({id(o): o for o in (self.optimizer, getattr(self.optimizer, "optimizer", None)) if o}.values()):
            for group in opt.param_groups:
                group.update(lr=float(c.lr), betas=tuple(c.betas), eps=float(c.eps), weight_decay=float(c.weight_decay))

    def reset_optimizer(self) -> None:
        """Forget the moments of the base optimizer DeepSpeed wraps (its state refills on the next step)."""
        inner = getattr(self.optimizer, "optimizer", self.optimizer)
        inner.state.clear()

    def optimizer_state(self) -> dict[str, Any]:
        return {}  # DeepSpeed writes its (possibly partitioned) optimizer state in `save`

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Restored by `load` from DeepSpeed's own checkpoint."""

    def save(self, folder: Path) -> None:
        self.ds.save_checkpoint(str(folder / "deepspeed"), tag="state")

    def load(self, folder: Path) -> None:
        path, _ = self.ds.load_checkpoint(str(folder / "deepspeed"), tag="state", load_optimizer_states=True,
                                          load_lr_scheduler_states=True)
        if path is None:
            raise LearnerError(f"no DeepSpeed checkpoint under {folder / 'deepspeed'}")
