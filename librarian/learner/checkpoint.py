"""Checkpoint files: a folder with trainable weights, optimizer state, RNG states and a JSON header.

Written to a temporary sibling folder and renamed into place, so a crash
never leaves half a checkpoint under the final name.
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
import torch

from librarian.learner.errors import LearnerError

HEADER = "learner.json"
FORMAT = 1


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch (CPU and CUDA) generator states."""
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write(folder: str | Path, header: dict[str, Any], tensors: dict[str, Any],
          engine_save: Any = None) -> Path:
    """Write a checkpoint folder atomically; `tensors` maps file stem -> object for `torch.save`."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".tmp.", dir=folder.parent))
    try:
        for stem, obj in tensors.items():
            torch.save(obj, tmp / f"{stem}.pt")
        if engine_save is not None:
            engine_save(tmp)
        (tmp / HEADER).write_text(json.dumps({"format": FORMAT, **header}, indent=2, sort_keys=True))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def read_header(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / HEADER
    if not path.is_file():
        raise LearnerError(f"{folder} is not a learner checkpoint (no {HEADER})")
    header = json.loads(path.read_text())
    if header.get("format") != FORMAT:
        raise LearnerError(f"{path}: checkpoint format {header.get('format')!r}, this code reads {FORMAT}")
    return header


def read_tensor(folder: str | Path, stem: str) -> Any:
    path = Path(folder) / f"{stem}.pt"
    if not path.is_file():
        raise LearnerError(f"checkpoint {folder} lacks {path.name}")
    return torch.load(path, map_location="cpu", weights_only=False)
