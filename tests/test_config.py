"""Typed configs with key=value overrides."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from librarian.config import ConfigError, load_config, to_plain


@dataclass
class Inner:
    lr: float = 1e-5
    steps: int = 10


@dataclass
class Outer:
    out_dir: str = "build/x"
    seed: int = 1
    learner: Inner = field(default_factory=Inner)


def test_defaults_file_and_overrides_compose(tmp_path) -> None:
    yaml = tmp_path / "c.yaml"
    yaml.write_text("seed: 7\nlearner:\n  steps: 3\n")
    cfg = load_config(Outer, ["--config", str(yaml), "learner.lr=0.5", "out_dir=/tmp/o"])
    assert isinstance(cfg, Outer) and cfg.seed == 7 and cfg.learner.steps == 3
    assert cfg.learner.lr == 0.5 and cfg.out_dir == "/tmp/o"
    assert to_plain(cfg)["learner"] == {"lr": 0.5, "steps": 3}


def test_unknown_key_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'learner.stpes'.*learner.steps"):
        load_config(Outer, ["learner.stpes=3"])


def test_wrong_type_names_the_key() -> None:
    with pytest.raises(ConfigError, match="seed"):
        load_config(Outer, ["seed=abc"])


def test_unknown_key_in_file_and_missing_file(tmp_path) -> None:
    yaml = tmp_path / "c.yaml"
    yaml.write_text("sed: 7\n")
    with pytest.raises(ConfigError, match=r"'sed'.*seed"):
        load_config(Outer, config_file=yaml)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Outer, ["--config", str(tmp_path / "none.yaml")])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(Outer, ["oops"])


def test_several_config_files_merge_in_order_and_errors_name_the_file(tmp_path) -> None:
    base, preset, bad = tmp_path / "base.yaml", tmp_path / "preset.yaml", tmp_path / "bad.yaml"
    base.write_text("seed: 7\nlearner:\n  steps: 3\n  lr: 0.1\n")
    preset.write_text("learner:\n  lr: 0.9\n")
    bad.write_text("learner:\n  stpes: 1\n")
    cfg = load_config(Outer, [f"config={base}", "--config", str(preset), "learner.steps=4"])
    assert (cfg.seed, cfg.learner.steps, cfg.learner.lr) == (7, 4, 0.9)
    cfg = load_config(Outer, [f"--config={preset}", f"config={base}"])
    assert cfg.learner.lr == 0.1  # the later file wins
    with pytest.raises(ConfigError, match=r"bad\.yaml.*learner.steps"):
        load_config(Outer, [f"config={base}", f"config={bad}"])


@dataclass
class Backend:
    options: dict = field(default_factory=lambda: {"policy": "kbgym_reader"})
    workers: int = 1


@dataclass
class WithOptions:
    probe: Backend = field(default_factory=Backend)


def test_a_free_form_dict_given_whole_replaces_the_old_one(tmp_path) -> None:
    preset = tmp_path / "gpu.yaml"
    preset.write_text("probe:\n  workers: 4\n  options: {model: /models/reader, dtype: bfloat16}\n")
    cfg = load_config(WithOptions, ["--config", str(preset)])
    assert cfg.probe.options == {"model": "/models/reader", "dtype": "bfloat16"} and cfg.probe.workers == 4
    cfg = load_config(WithOptions, ["probe.options={model: tiny}"])
    assert cfg.probe.options == {"model": "tiny"}
    cfg = load_config(WithOptions, ["--config", str(preset), "probe.options.dtype=float32"])  # one key: merged
    assert cfg.probe.options == {"model": "/models/reader", "dtype": "float32"}
