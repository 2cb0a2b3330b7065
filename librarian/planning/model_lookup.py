"""A model's shape for `librarian plan` and the config check: read from a folder's `config.json`, or a known
architecture's by name; what cannot be sized is a `ConfigError` that says what to pass instead."""

from __future__ import annotations

import json
from pathlib import Path

from librarian.config import ConfigError
from librarian.planning.model_shape import KNOWN, ModelShape, ShapeError, from_config, known


def resolve(model: str) -> tuple[ModelShape, str]:
    """(shape, where it came from) for a model folder with a config.json, or a known architecture's name."""
    folder = Path(model)
    if (folder / "config.json").is_file():
        try:
            return from_config(json.loads((folder / "config.json").read_text()), str(folder)), "config.json"
        except ShapeError as exc:
            raise ConfigError(str(exc)) from None
    shape = known(model)
    if shape is not None:
        return shape, "known architecture"
    raise ConfigError(f"model {model!r}: no config.json there and not a known architecture "
                      f"({', '.join(sorted(KNOWN))}); pass --policy / --answerer")
