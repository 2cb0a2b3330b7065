"""Structured configs: dataclass defaults, an optional YAML file, then `key=value` overrides.

An unknown key or a value of the wrong type is an error that names it and
suggests the closest valid key.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override was invalid; the message names the key and the fix."""


def _all_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for key in cfg.keys():
        full = f"{prefix}{key}"
        keys.append(full)
        value = cfg._get_node(key)  # noqa: SLF001 - walk without resolving interpolations
        if isinstance(value, DictConfig):
            keys.extend(_all_keys(value, full + "."))
    return keys


def _closest(key: str, schema: DictConfig) -> str:
    close = difflib.get_close_matches(key, _all_keys(schema), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _free_form_paths(schema: DictConfig, given: DictConfig, prefix: str = "") -> list[str]:
    """Dotted paths that `given` sets whole and that are free-form dicts in `schema` (e.g. backend `options`)."""
    out: list[str] = []
    for key in given.keys():
        node = schema._get_node(key) if key in schema else None  # noqa: SLF001 - typed walk
        sub = given._get_node(key)  # noqa: SLF001
        if not isinstance(node, DictConfig) or not isinstance(sub, DictConfig):
            continue
        if node._metadata.object_type in (dict, None):  # noqa: SLF001 - a plain dict field, not a dataclass
            out.append(f"{prefix}{key}")
        else:
            out.extend(_free_form_paths(node, sub, f"{prefix}{key}."))
    return out


def _merge(merged: DictConfig, schema: DictConfig, given: DictConfig, key: str | None = None) -> DictConfig:
    """`given` over `merged`; a free-form dict that `given` sets whole replaces the old one (no key survives).

    For a `key=value` override, only `key` itself counts as set whole
    (`probe.options={...}` replaces, `probe.options.dtype=...` merges).
    """
    out = OmegaConf.merge(merged, given)
    for path in _free_form_paths(schema, given):
        if key is not None and path != key:
            continue
        OmegaConf.update(out, path, OmegaConf.select(given, path), merge=False)
    return out  # type: ignore[return-value]


def load_config(schema: type[T], args: Sequence[str] = (), config_file: str | Path | None = None) -> T:
    """Build a typed config: `schema` defaults <- YAML file <- `key=value` args.

    `args` may contain `--config PATH` (or `config=PATH`), several times:
    the files merge in order (a preset such as configs/cluster.yaml after a
    pipeline's config), then the overrides. Sections merge key by key, but a
    free-form dict (a backend's `options`) given whole replaces the previous
    one, so a preset never inherits another backend's keywords. Returns an instance of `schema`
    with every value type-checked.
    """
    base = OmegaConf.structured(schema)
    overrides: list[str] = []
    files: list[str | Path] = [config_file] if config_file is not None else []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in ("--config", "-c"):
            if not rest:
                raise ConfigError("--config needs a path to a YAML file")
            files.append(rest.pop(0))
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
        elif arg.startswith("config="):
            files.append(arg.split("=", 1)[1])
        elif arg.startswith("--") and "=" in arg:
            overrides.append(arg[2:])
        elif "=" in arg:
            overrides.append(arg)
        else:
            raise ConfigError(f"cannot read argument {arg!r}: write overrides as key=value (e.g. out_dir=build/run)")
    merged = base
    config_file = None
    try:
        for config_file in files:
            path = Path(config_file)
            if not path.is_file():
                raise ConfigError(f"config file {str(path)!r} does not exist")
            merged = _merge(merged, base, OmegaConf.load(path))  # type: ignore[arg-type]
        config_file = None
        for item in overrides:
            key = item.split("=", 1)[0]
            try:
                merged = _merge(merged, base, OmegaConf.from_dotlist([item]), key)
            except ConfigKeyError:
                raise ConfigError(f"unknown config key '{key}'{_closest(key, base)}") from None
            except ValidationError as exc:
                raise ConfigError(f"bad value for '{key}': {exc.msg}") from None
    except ConfigKeyError as exc:
        key = str(exc.full_key) if getattr(exc, "full_key", None) else str(exc)
        where = f" in {config_file}" if config_file is not None else ""
        raise ConfigError(f"unknown config key '{key}'{where}{_closest(key, base)}") from None
    except ValidationError as exc:
        where = f" in {config_file}" if config_file is not None else ""
        raise ConfigError(f"bad value for '{exc.full_key}'{where}: {exc.msg}") from None
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc)) from None
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def to_plain(config: Any) -> dict[str, Any]:
    """A resolved config as plain JSON-able data (for results.json and MLflow)."""
    return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)  # type: ignore[return-value]
