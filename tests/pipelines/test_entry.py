"""The shared pipeline CLI entry: help lists every key, config errors are one line with exit 2, results decide."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from librarian.config import ConfigError
from librarian.pipelines.entry import config_keys, pipeline_main, write_resolved_config


@dataclass
class Inner:
    lr: float = 0.1
    options: dict = field(default_factory=dict)


@dataclass
class Toy:
    out_dir: str = "build/toy"
    steps: int = 1
    inner: Inner = field(default_factory=Inner)


def _check(cfg: Toy) -> None:
    if cfg.steps < 0:
        raise ConfigError(f"steps must be >= 0, got {cfg.steps}")


def test_help_lists_every_dotted_key(capsys):
    assert pipeline_main("toy", "The toy pipeline.", Toy, lambda cfg: {}, ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The toy pipeline.")
    assert [line.strip() for line in out.splitlines() if "=" in line and not line.startswith("    ")][-4:] == [
        "out_dir=build/toy", "steps=1", "inner.lr=0.1", "inner.options={}"]


def test_errors_are_one_line_and_exit_2_and_the_run_never_starts(capsys):
    ran = []
    assert pipeline_main("toy", None, Toy, ran.append, ["inner.lrr=1"], check=_check) == 2
    assert pipeline_main("toy", None, Toy, ran.append, ["steps=-1"], check=_check) == 2
    lines = capsys.readouterr().err.splitlines()
    assert ran == [] and lines[0].startswith("librarian toy: unknown config key 'inner.lrr'") and "inner.lr" in lines[0]
    assert lines[1] == "librarian toy: steps must be >= 0, got -1"


def test_the_run_gets_the_config_and_its_results_decide_the_exit_code(tmp_path, capsys):
    def run(cfg: Toy) -> dict:
        write_resolved_config(cfg, cfg.out_dir)
        (tmp_path / "results.json").write_text("{}")
        return {"failed": cfg.steps}

    args = [f"out_dir={tmp_path}", "steps=3"]
    assert pipeline_main("toy", None, Toy, run, args, exit_code=lambda r: 1 if r["failed"] else 0) == 1
    assert "steps: 3" in (tmp_path / "config.yaml").read_text()
    assert f"wrote {tmp_path / 'results.json'}" in capsys.readouterr().out
    assert pipeline_main("toy", None, Toy, run, [f"out_dir={tmp_path}", "steps=0"],
                         exit_code=lambda r: 1 if r["failed"] else 0) == 0


keys = st.text(alphabet="abcxyz", min_size=1, max_size=4)
configs = st.recursive(st.dictionaries(keys, st.integers(), max_size=3),
                       lambda inner: st.dictionaries(keys, inner, max_size=3), max_leaves=12)


@given(configs)
def test_config_keys_name_each_leaf_once(cfg):
    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and v:
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    got = config_keys(cfg)
    assert sorted(got) == sorted(leaves(cfg)) and len(set(got)) == len(got)


def test_a_config_error_raised_by_the_run_is_one_line_and_exit_2(capsys):
    def run(cfg: Toy) -> dict:
        raise ConfigError("cell 'a': unknown config key 'x'")

    assert pipeline_main("toy", None, Toy, run, []) == 2
    assert capsys.readouterr().err.strip() == "librarian toy: cell 'a': unknown config key 'x'"
