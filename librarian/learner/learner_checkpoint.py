"""A learner's checkpoint, from one learner or from every rank of a data-parallel group.

`save` writes what `load` resumes exactly: the trainable weights, the
optimizer state, each rank's RNG state, the step, version and samples seen,
the frozen KL reference (when there is one) and the caller's `extra` (e.g.
the data position). A single learner writes its folder at once
(`checkpoint.write`). A group stages one folder (rank 0 names it), every
rank writes its own files into it (its RNG state; DeepSpeed's partitioned
states), and rank 0 commits it once every rank's files are there; a failure
on any rank is told to all of them, so none waits forever. Every rank calls
`save` and `load` together (ZeRO-3 gathers its partitioned parameters
collectively). The file format is `checkpoint`'s.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner import checkpoint
from librarian.learner.errors import LearnerError

if TYPE_CHECKING:
    from librarian.learner.learner import Learner


def save(learner: Learner, folder: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """A checkpoint of `learner` in `folder` that `load` resumes exactly; `extra` (JSON) is returned by `load`."""
    cfg = learner.cfg
    header = {"step": learner.step_count, "version": learner.version, "samples_seen": learner.samples_seen,
              "engine": cfg.engine, "lora": cfg.lora.shape(), "extra": extra or {},
              "reference": "frozen" if learner.reference_frozen else "initial",
              "kl_reference": cfg.loss.kl_coef > 0, "world_size": learner.world}
    tensors: dict[str, Any] = {checkpoint.rng_stem(learner.rank): checkpoint.rng_state()}
    engine = learner.engine
    if learner.rank == 0 or getattr(engine, "partitioned", False):  # ZeRO-3: every rank joins the gather
        tensors.update(weights=engine.trainable_state(), optimizer=engine.optimizer_state())
        if learner.reference_frozen:
            tensors["reference"] = learner.reference.state()
    if learner.world == 1:
        return checkpoint.write(folder, header, tensors, engine.save)
    return _save_group(learner, Path(folder), header, tensors)


def _save_group(learner: Learner, folder: Path, header: dict[str, Any], tensors: dict[str, Any]) -> Path:
    """Every rank writes into one staged folder; rank 0 commits it once all ranks' files are there."""
    import torch.distributed as dist

    rank, world = learner.rank, learner.world
    box = [str(checkpoint.stage(folder)) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    tmp = Path(box[0])
    local = None
    try:
        learner.engine.save(tmp)  # collective; DeepSpeed: each rank writes its partition
        if rank:
            torch.save(tensors[checkpoint.rng_stem(rank)], tmp / f"{checkpoint.rng_stem(rank)}.pt")
    except Exception as exc:  # noqa: BLE001 - every rank must learn of it, or the others wait forever
        local = f"learner rank {rank} could not write checkpoint {folder}: {exc!r}"
    errors: list[Any] = [None] * world
    dist.all_gather_object(errors, local)
    verdict = [next((e for e in errors if e), None)]
    if rank == 0 and verdict[0] is None:
        missing = [r for r in range(1, world) if not (tmp / f"{checkpoint.rng_stem(r)}.pt").is_file()]
        if missing:
            verdict[0] = (f"checkpoint {folder}: learner ranks {missing} wrote their files elsewhere; put "
                          "checkpoints on a filesystem every learner node shares")
        else:
            try:
                checkpoint.commit(tmp, folder, header, tensors)
            except Exception as exc:  # noqa: BLE001
                verdict[0] = f"learner rank 0 could not write checkpoint {folder}: {exc!r}"
    if rank == 0 and verdict[0] is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    dist.broadcast_object_list(verdict, src=0)
    if verdict[0] is not None:
        raise LearnerError(verdict[0])
    return folder


def load(learner: Learner, folder: str | Path) -> dict[str, Any]:
    """Resume `learner` from `save`'s folder; returns its `extra`. The base model and config must match; the
    optimizer's moments come from the folder, its hyperparameters (lr, betas, eps, weight decay) from the config."""
    cfg = learner.cfg
    header = checkpoint.read_header(folder)
    saved_lora = {k: v for k, v in header["lora"].items() if k != "publish"}
    if saved_lora != cfg.lora.shape() or header["engine"] != cfg.engine:
        raise LearnerError(f"checkpoint {folder} was written with engine {header['engine']!r} and lora "
                           f"{saved_lora}, this learner has {cfg.engine!r} and {cfg.lora.shape()}")
    saved_world = int(header.get("world_size", 1))
    if cfg.engine == "deepspeed" and saved_world != learner.world:
        raise LearnerError(f"checkpoint {folder} was written by {saved_world} DeepSpeed learner ranks and its "
                           f"optimizer state is partitioned {saved_world} ways; resume with learner.workers="
                           f"{saved_world} (this group has {learner.world})")
    learner.engine.load_trainable_state(checkpoint.read_tensor(folder, "weights"))
    learner.engine.load_optimizer_state(checkpoint.read_tensor(folder, "optimizer"))
    _restore_reference(learner, folder, header)
    learner.engine.load(Path(folder))
    learner.engine.apply_hyperparameters()  # the saved state's moments, this config's lr, betas, eps, decay
    stem = checkpoint.rng_stem(learner.rank)
    checkpoint.set_rng_state(checkpoint.read_tensor(folder, stem if (Path(folder) / f"{stem}.pt").is_file()
                                                    else "rng"))
    learner.step_count, learner.version = int(header["step"]), int(header["version"])
    learner.samples_seen = int(header["samples_seen"])
    return dict(header.get("extra") or {})


def _restore_reference(learner: Learner, folder: str | Path, header: dict[str, Any]) -> None:
    """The reference of checkpoint `folder` (before DeepSpeed's module state, which holds a LoRA reference)."""
    cfg = learner.cfg
    frozen = header.get("reference", "initial") == "frozen"  # older checkpoints: the initial reference
    keeps = cfg.loss.kl_coef > 0
    if cfg.engine == "deepspeed" and cfg.lora.enabled and header.get("kl_reference", keeps) != keeps:
        raise LearnerError(f"checkpoint {folder} was written with{'' if not keeps else 'out'} a reference "
                           "adapter (learner.loss.kl_coef > 0) and DeepSpeed's module state must match; "
                           "resume with the same kl_coef sign")
    if frozen and keeps:
        learner.reference.load_state(checkpoint.read_tensor(folder, "reference"))
    elif learner.reference_frozen and not cfg.lora.enabled:
        raise LearnerError(f"checkpoint {folder} has the initial reference, which this full-weight learner "
                           "no longer holds (it froze its reference); load it into a new learner")
    learner.reference_frozen = frozen and keeps
