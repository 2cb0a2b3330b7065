"""Structured configs: dataclass defaults, optional YAML files, then `key=value` overrides.

An unknown key or a value of the wrong type is an error that names it (and,
for a YAML file, the file and line) and suggests the closest valid key. The
schema is walked through `dataclasses` and the files and overrides are read
with OmegaConf's public API (`OmegaConf.load`, `OmegaConf.from_dotlist`).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import io
import textwrap
import tokenize
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override was invalid; the message names the key and the fix."""


class InputError(ValueError):
    """A user's input outside a config was missing or malformed (a corpus or question file, a flag, a reader that
    cannot read a workspace); the message names it."""


@dataclasses.dataclass(frozen=True)
class KeyDoc:
    """One settable key of a schema: dotted name, default, type and a one-line description."""

    key: str
    default: Any
    type_name: str
    help: str


# --- the schema, walked through dataclasses ----------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an unresolvable annotation: fall back to the raw ones
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _is_free_form(tp: Any) -> bool:
    """A plain `dict` field (a backend's `options`): any keys, replaced whole when given whole."""
    return tp is dict or typing.get_origin(tp) is dict


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


@functools.cache
def _field_comments(cls: type) -> dict[str, str]:
    """Each field's trailing `# comment` in the class source (the project's way of documenting a field)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
    except tokenize.TokenError:
        return {}
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            end = node.end_lineno or node.lineno
            while end < len(lines) and lines[end].lstrip().startswith("#"):  # a comment continued below
                end += 1
            text = " ".join(comments[i] for i in range(node.lineno, end + 1)
                            if i in comments and not comments[i].startswith("noqa"))
            if text:
                out[node.target.id] = text
    for base in cls.__mro__[1:]:  # inherited fields keep their parent's comment
        if dataclasses.is_dataclass(base):
            out = {**_field_comments(base), **out}
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def describe(schema: type, glossary: Mapping[str, str] | None = None, prefix: str = "") -> list[KeyDoc]:
    """Every settable key of `schema` (nested sections flattened), in declaration order.

    A key's description is its field's `metadata["help"]`, else the field's
    trailing comment, else the longest dotted suffix of the key found in
    `glossary` (`reader.backend`, then `backend`); '' when none has one.
    """
    glossary = glossary or {}
    out: list[KeyDoc] = []
    hints = _hints(schema)
    comments = _field_comments(schema)
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        tp = hints.get(f.name, f.type)
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            out.extend(describe(tp, glossary, key + "."))
            continue
        parts = key.split(".")
        suffixes = (".".join(parts[i:]) for i in range(len(parts)))
        text = f.metadata.get("help") or comments.get(f.name) or next(
            (glossary[s] for s in suffixes if s in glossary), "")
        out.append(KeyDoc(key, _default(f), _type_name(tp), " ".join(str(text).split())))
    return out


def _all_keys(schema: type) -> list[str]:
    """Dotted keys for suggestions: sections, leaves and the keys of free-form defaults."""
    keys: list[str] = []
    for doc in describe(schema):
        parts = doc.key.split(".")
        keys.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        keys.append(doc.key)
        if isinstance(doc.default, dict):
            keys.extend(f"{doc.key}.{k}" for k in doc.default)
    return list(dict.fromkeys(keys))


def _closest(key: str, schema: type) -> str:
    close = difflib.get_close_matches(key, _all_keys(schema), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _free_form_paths(schema: type, given: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths that `given` sets to a whole dict and that are free-form dicts in `schema`."""
    if not (dataclasses.is_dataclass(schema) and isinstance(schema, type)):
        return
    hints = _hints(schema)
    for key, value in given.items():
        tp = hints.get(str(key))
        if tp is None or not isinstance(value, Mapping):
            continue
        if _is_free_form(tp):
            yield f"{prefix}{key}"
        elif dataclasses.is_dataclass(tp):
            yield from _free_form_paths(tp, value, f"{prefix}{key}.")


def _merge(merged: DictConfig, schema: type, given: DictConfig, key: str | None = None) -> DictConfig:
    """`given` over `merged`; a free-form dict that `given` sets whole replaces the old one (no key survives).

    For a `key=value` override, only `key` itself counts as set whole
    (`probe.options={...}` replaces, `probe.options.dtype=...` merges).
    """
    out = OmegaConf.merge(merged, given)
    plain = OmegaConf.to_container(given, resolve=False)
    for path in _free_form_paths(schema, plain if isinstance(plain, Mapping) else {}):
        if key is not None and path != key:
            continue
        OmegaConf.update(out, path, OmegaConf.select(given, path), merge=False)
    return out  # type: ignore[return-value]


# --- YAML files --------------------------------------------------------------------------------------


def _line_of(path: Path, key: str) -> int | None:
    """The 1-based line where dotted `key` is set in the YAML file `path` (None when not found)."""
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for part in key.split("."):
        if not isinstance(node, yaml.MappingNode):
            return line
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == part:
                line, node = k.start_mark.line + 1, v
                break
        else:
            return line
    return line


def _where(path: Path, key: str | None = None) -> str:
    line = _line_of(path, key) if key else None
    return f"{path}, line {line}" if line else str(path)


def _load_yaml(path: Path) -> DictConfig:
    """A YAML file as a DictConfig; malformed YAML is one line naming the file, line and column."""
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML ({problem})") from None
    except OmegaConfBaseException as exc:  # e.g. a duplicate key
        raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path}: a config file must be a mapping of key: value, got a list")
    return loaded


# --- arguments ---------------------------------------------------------------------------------------

OUT_FLAGS = ("--out", "-o")
CONFIG_FLAGS = ("--config", "-c")


def split_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Command-line arguments -> (config files, `key=value` overrides).

    `--config PATH`, `--config=PATH`, `-c PATH` and `config=PATH` name a file
    (several merge in order); `--out DIR` and `--out=DIR` are `out_dir=DIR`;
    `key=value` and `--key=value` are overrides.
    """
    files: list[str] = []
    overrides: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg in CONFIG_FLAGS or arg in OUT_FLAGS:
            if not rest or rest[0].startswith("-"):
                raise ConfigError(f"{arg} needs a value ({'a YAML file' if arg in CONFIG_FLAGS else 'a folder'})")
            value = rest.pop(0)
            if arg in CONFIG_FLAGS:
                files.append(value)
            else:
                overrides.append(f"out_dir={value}")
        elif arg.startswith(("--config=", "config=")):
            files.append(arg.split("=", 1)[1])
        elif arg.startswith("--out="):
            overrides.append("out_dir=" + arg.split("=", 1)[1])
        elif arg.startswith("--") and "=" in arg:
            overrides.append(arg[2:])
        elif "=" in arg and not arg.startswith("-"):
            overrides.append(arg)
        else:
            raise ConfigError(f"cannot read argument {arg!r}: write overrides as key=value (e.g. out_dir=build/run)")
    return files, overrides


def _validation_text(exc: OmegaConfBaseException) -> str:
    """OmegaConf's message without its `full_key:` / `object_type=` lines."""
    return (getattr(exc, "msg", None) or str(exc)).splitlines()[0].strip()


def load_config(schema: type[T], args: Sequence[str] = (), config_file: str | Path | None = None) -> T:
    """Build a typed config: `schema` defaults <- YAML files <- `key=value` args (see `split_args`).

    Sections merge key by key, but a free-form dict (a backend's `options`)
    given whole replaces the previous one, so a preset never inherits another
    backend's keywords. Returns an instance of `schema` with every value type-checked.
    """
    files, overrides = split_args(args)
    if config_file is not None:
        files.insert(0, str(config_file))
    merged = OmegaConf.structured(schema)
    for name in files:
        path = Path(name)
        given = _load_yaml(path)
        try:
            merged = _merge(merged, schema, given)
        except ConfigKeyError as exc:
            key = str(exc.full_key or exc.key)
            raise ConfigError(f"{_where(path, key)}: unknown config key '{key}'{_closest(key, schema)}") from None
        except ValidationError as exc:
            key = str(exc.full_key)
            raise ConfigError(f"{_where(path, key)}: bad value for '{key}': {_validation_text(exc)}") from None
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{path}: {_validation_text(exc)}") from None
    for item in overrides:
        key = item.split("=", 1)[0]
        try:
            given = OmegaConf.from_dotlist([item])
        except (OmegaConfBaseException, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read override {item!r}: {str(exc).splitlines()[0]}") from None
        try:
            merged = _merge(merged, schema, given, key)
        except ConfigKeyError:
            raise ConfigError(f"unknown config key '{key}'{_closest(key, schema)}") from None
        except ValidationError as exc:
            raise ConfigError(f"bad value for '{key}': {_validation_text(exc)}") from None
        except OmegaConfBaseException as exc:
            raise ConfigError(f"override {item!r}: {_validation_text(exc)}") from None
    try:
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:  # a required value left missing, a bad interpolation
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"{f'{key}: ' if key else ''}{_validation_text(exc)}") from None


def to_plain(config: Any) -> dict[str, Any]:
    """A resolved config as plain JSON-able data (for results.json and MLflow)."""
    return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)  # type: ignore[return-value]


def to_yaml(config: Any) -> str:
    """A resolved config as YAML."""
    return OmegaConf.to_yaml(OmegaConf.structured(config), resolve=True)


def write_config(out: Any, config: Any) -> Path:
    """Create the run folder `out` and write the resolved config to `out/config.yaml`; returns the folder."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(to_yaml(config), encoding="utf-8")
    return folder
