"""Checkpoint files: a folder with trainable weights, optimizer state, RNG states and a JSON header.

Written to a temporary sibling folder and renamed into place, so a crash
never leaves half a checkpoint under the final name. A learner group stages
one folder (rank 0 makes it), every rank writes its own files into it
(`rng_rank{r}.pt`, DeepSpeed's partitioned states), and rank 0 commits it
once all ranks' files are there: the folder must be on a filesystem every
learner node shares.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from librarian.learner.errors import LearnerError

HEADER = "learner.json"
FORMAT = 1


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU and CUDA) generator states."""
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_stem(rank: int) -> str:
    """The RNG file stem of learner rank `rank` (rank 0's is `rng`, as a single learner's)."""
    return "rng" if rank == 0 else f"rng_rank{rank}"


def stage(folder: str | Path) -> Path:
    """A new temporary sibling of `folder` to write a checkpoint into."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=folder.name + ".tmp.", dir=folder.parent))


def commit(tmp: Path, folder: str | Path, header: dict[str, Any], tensors: dict[str, Any]) -> Path:
    """Write `tensors` (file stem -> object for `torch.save`) and the header into `tmp`, then rename it to
    `folder` (replacing an older checkpoint there)."""
    import torch

    folder = Path(folder)
    for stem, obj in tensors.items():
        torch.save(obj, tmp / f"{stem}.pt")
    (tmp / HEADER).write_text(json.dumps({"format": FORMAT, **header}, indent=2, sort_keys=True))
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder


def write(folder: str | Path, header: dict[str, Any], tensors: dict[str, Any],
          engine_save: Any = None) -> Path:
    """Write a checkpoint folder atomically; `tensors` maps file stem -> object for `torch.save`."""
    tmp = stage(folder)
    try:
        if engine_save is not None:
            engine_save(tmp)
        return commit(tmp, folder, header, tensors)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_header(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / HEADER
    if not path.is_file():
        raise LearnerError(f"{folder} is not a learner checkpoint (no {HEADER})")
    header = json.loads(path.read_text())
    if header.get("format") != FORMAT:
        raise LearnerError(f"{path}: checkpoint format {header.get('format')!r}, this code reads {FORMAT}")
    return header


def read_tensor(folder: str | Path, stem: str) -> Any:
    import torch

    path = Path(folder) / f"{stem}.pt"
    if not path.is_file():
        raise LearnerError(f"checkpoint {folder} lacks {path.name}")
    return torch.load(path, map_location="cpu", weights_only=False)
