"""Typed configs with key=value overrides."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import pytest

import librarian.config as config
from librarian.config import ConfigError, describe, load_config, to_plain, write_config


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


def test_malformed_yaml_is_one_line_naming_the_file_line_and_column(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 7\nlearner:\n  lr: [1, 2\n")
    with pytest.raises(ConfigError) as caught:
        load_config(Outer, ["--config", str(bad)])
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{bad}, line 4, column 1: not valid YAML")
    tabs = tmp_path / "tabs.yaml"
    tabs.write_text("seed: 7\n\tsteps: 3\n")
    with pytest.raises(ConfigError, match=r"tabs\.yaml, line 2, column 1: not valid YAML"):
        load_config(Outer, [f"config={tabs}"])
    listed = tmp_path / "list.yaml"
    listed.write_text("- seed: 7\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: a config file must be a mapping"):
        load_config(Outer, ["-c", str(listed)])


def test_a_bad_key_or_value_in_a_file_names_its_line(tmp_path) -> None:
    yaml = tmp_path / "c.yaml"
    yaml.write_text("seed: 7\nlearner:\n  lr: 0.1\n  stpes: 3\n")
    with pytest.raises(ConfigError, match=r"c\.yaml, line 4: unknown config key 'learner.stpes'.*learner.steps"):
        load_config(Outer, ["--config", str(yaml)])
    yaml.write_text("out_dir: x\nseed: many\n")
    with pytest.raises(ConfigError) as caught:
        load_config(Outer, ["--config", str(yaml)])
    assert str(caught.value).startswith(f"{yaml}, line 2: bad value for 'seed'") and "\n" not in str(caught.value)


def test_bad_override_values_are_one_line() -> None:
    for args in (["seed=abc"], ["learner=[1, 2]"], ["learner.lr=[1,"]):
        with pytest.raises(ConfigError) as caught:
            load_config(Outer, args)
        assert "\n" not in str(caught.value) and "full_key" not in str(caught.value), args


def test_out_is_out_dir_and_flags_need_their_value(tmp_path) -> None:
    assert load_config(Outer, ["--out", str(tmp_path)]).out_dir == str(tmp_path)
    assert load_config(Outer, [f"--out={tmp_path}", "seed=2"]).out_dir == str(tmp_path)
    assert load_config(Outer, ["--out", "a", "out_dir=b"]).out_dir == "b"  # in order: the later one wins
    for flag in ("--out", "--config"):
        with pytest.raises(ConfigError, match=f"{flag} needs a value"):
            load_config(Outer, [flag])
        with pytest.raises(ConfigError, match=f"{flag} needs a value"):
            load_config(Outer, [flag, "--print-config"])


@dataclass
class Documented:
    """A schema whose keys describe themselves in the three ways `describe` reads."""

    plain: int = 1  # a trailing comment,
    # continued on the next line
    meta: str = field(default="m", metadata={"help": "from the field's metadata"})
    glossed: float = 0.5
    inner: Inner = field(default_factory=Inner)


def test_describe_reads_metadata_comments_and_the_glossary() -> None:
    docs = {d.key: d for d in describe(Documented, {"glossed": "from the glossary", "steps": "inner steps"})}
    assert list(docs) == ["plain", "meta", "glossed", "inner.lr", "inner.steps"]
    assert docs["plain"].help == "a trailing comment, continued on the next line"
    assert docs["meta"].help == "from the field's metadata" and docs["glossed"].help == "from the glossary"
    assert docs["inner.steps"].help == "inner steps" and docs["inner.lr"].help == ""
    assert (docs["plain"].default, docs["inner.lr"].default, docs["plain"].type_name) == (1, 1e-5, "int")


def test_the_loader_uses_no_private_omegaconf_attributes() -> None:
    source = inspect.getsource(config)
    assert "_get_node" not in source and "._metadata" not in source


def test_write_config_creates_the_run_folder_and_writes_the_config_that_loads_back(tmp_path):
    cfg = load_config(Outer, ["learner.lr=0.5", "seed=3"])
    folder = write_config(tmp_path / "runs" / "a", cfg)
    assert folder == tmp_path / "runs" / "a" and folder.is_dir()
    again = load_config(Outer, [], config_file=str(folder / "config.yaml"))
    assert to_plain(again) == to_plain(cfg) and again.learner.lr == 0.5 and again.seed == 3
