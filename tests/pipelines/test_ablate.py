"""`librarian ablate`: expansion, naming, validation and placement (pure), the report, and the smoke sweep
end to end as a Ray Tune experiment on a local Ray runtime against a real MLflow server (a parent run and a
child run per cell), run again to resume it. Search, ASHA, retries and a killed sweep: test_ablate_search.py."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from librarian.cli import main
from librarian.config import ConfigError, load_config
from librarian.pipelines import registry
from librarian.pipelines.ablate import cells
from librarian.pipelines.ablate import config as ac
from librarian.pipelines.ablate import report as rep
from librarian.pipelines.ablate.config import AblateConfig
from librarian.pipelines.ablate.sweep import run as run_sweep
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.curator.train import TrainCuratorConfig
from librarian.pipelines.evaluate.evaluate import EvaluateConfig
from tests.tracking.conftest import mlflow_server  # noqa: F401 - the real MLflow server fixture

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ROOT = Path(__file__).resolve().parents[2]
SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def sweep(*args: str) -> AblateConfig:
    return ac.load(list(args))


# --- expansion and names ------------------------------------------------------------------------------------
def test_grid_is_the_cartesian_product_with_readable_names():
    cfg = sweep("grid={reward.every: [1, 2], reward.gamma: [1.0, 0.9]}")
    cells = ac.sweep_cells(cfg)
    assert [c.name for c in cells] == ["every-1_gamma-1.0", "every-1_gamma-0.9", "every-2_gamma-1.0",
                                       "every-2_gamma-0.9"]
    assert cells[1].overrides == {"reward.every": 1, "reward.gamma": 0.9}
    assert len({c.group for c in cells}) == 4


def test_nested_grid_keys_and_clashing_tails():
    cfg = sweep("grid.reward.every=[3]", "grid.probe.budget=[4, 8]", "grid.sft.budget=[5]")
    names = [c.name for c in ac.sweep_cells(cfg)]
    assert names == ["every-3_probe.budget-4_sft.budget-5", "every-3_probe.budget-8_sft.budget-5"]


def test_seeds_replicate_cells_and_group_them():
    cfg = sweep("grid={reader.budget: [2, 8]}", "seeds=[1, 2]", "pipeline=evaluate")
    cells = ac.sweep_cells(cfg)
    assert [c.name for c in cells] == ["budget-2_seed-1", "budget-2_seed-2", "budget-8_seed-1", "budget-8_seed-2"]
    assert [c.group for c in cells] == ["budget-2", "budget-2", "budget-8", "budget-8"]
    assert cells[3].overrides == {"reader.budget": 8, "seed": 2}
    # a grid over seed groups the same way
    cells = ac.sweep_cells(sweep("grid={seed: [1, 2], reader.budget: [4]}"))
    assert {c.group for c in cells} == {"budget-4"}


def test_explicit_cells_join_the_grid():
    cfg = sweep("grid={reward.every: [1]}",
                "cells=[{name: no_hints, overrides: {rollout.hint_every: 0}}, {overrides: [reward.gamma=0.5]}]")
    cells = ac.sweep_cells(cfg)
    assert [c.name for c in cells] == ["every-1", "no_hints", "gamma-0.5"]
    assert cells[2].overrides == {"reward.gamma": 0.5}
    assert [c.name for c in ac.sweep_cells(sweep())] == ["base"]


@pytest.mark.parametrize(("args", "match"), [
    (["cells=[{name: ../evil}]"], "not filesystem-safe"),
    (["cells=[{name: a}, {name: a}]"], "duplicate names"),
    (["cells=[{name: a, overide: {x: 1}}]"], r"unknown field\(s\) \['overide'\]"),
    (["cells=[{name: a, resources: {cpu: 1}}]"], "unknown resources field"),
    (["grid={reward.every: []}"], "grid.reward.every: needs a non-empty list"),
    (["grid={reward.every: 3}"], "needs a non-empty list"),
    (["seeds=[1]", "cells=[{name: a, overrides: {seed: 3}}]"], "sets seed and seeds is given"),
    (["cells=[{name: a, overrides: [nokey]}]"], "is not key=value"),
])
def test_bad_sweeps_are_named(args, match):
    with pytest.raises(ConfigError, match=match):
        ac.sweep_cells(sweep(*args))


def test_bad_sweep_settings_are_named():
    with pytest.raises(ConfigError, match="unknown pipeline 'train_bilder'"):
        sweep("pipeline=train_bilder")
    with pytest.raises(ConfigError, match="retries must be >= 0"):
        sweep("retries=-1")
    with pytest.raises(ConfigError, match="did you mean 'max_concurrent'"):
        sweep("max_concurent=2")


def test_validation_names_the_cell_and_the_key(tmp_path):
    cfg = sweep("grid={reward.every: [1], reward.everyy: [2]}")
    with pytest.raises(ConfigError, match=r"cell 'every-1_everyy-2': unknown config key 'reward.everyy' "
                                          r"\(did you mean 'reward.every'\?\)"):
        ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)
    cfg = sweep("cells=[{name: hot, overrides: {rollout.temperature: 0.7}}]")  # the pipeline's own check
    with pytest.raises(ConfigError, match="cell 'hot': learner.temperature"):
        ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)
    cfg = sweep("pipeline=evaluate", "cells=[{name: typed, overrides: {reader.budget: many}}]")
    with pytest.raises(ConfigError, match="cell 'typed': bad value for 'reader.budget'"):
        ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written before the sweep is valid


def test_validated_cells_carry_out_dir_and_tracking(tmp_path):
    cfg = sweep("grid={reward.every: [2]}", "base.overrides={rollout.options: {model: tiny}, steps: 3}")
    [cell] = ac.validate(cfg, ac.sweep_cells(cfg), tmp_path, {"tracking_uri": "sqlite:///x.db", "experiment": "abl"})
    c = cell.config
    assert c.out_dir == str(tmp_path / "cells" / "every-2") and c.reward.every == 2 and c.steps == 3
    assert c.rollout.options == {"model": "tiny"} and c.tracking_uri == "sqlite:///x.db" and c.experiment == "abl"


def test_tracking_keys_follow_each_pipeline():
    assert ac.tracking_overrides(TrainBuilderConfig, "u", "e") == {"tracking_uri": "u", "experiment": "e"}
    assert ac.tracking_overrides(EvaluateConfig, "u", "e") == {"tracking_uri": "u", "experiment": "e"}
    assert ac.tracking_overrides(TrainCuratorConfig, "u", "e") == {"tracking_uri": "u", "experiment": "e"}


def test_placement_comes_from_the_pipeline_config(tmp_path):
    cfg = sweep("grid={rollout.workers: [1, 3]}", "base.overrides={ray.learner_cpus: 0.5, probe.workers: 1}",
                "cells=[{name: pinned, resources: {cpus: 6, custom: {big: 1}}}]")
    cells = ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)
    one, three, pinned = (ac.placement(cfg, c) for c in cells)
    # a bundle per actor: learner 0.5 CPU, each rollout worker 1 CPU, the probe worker 1 CPU
    assert one.bundles == [{"CPU": 0.5}, {"CPU": 1.0}, {"CPU": 1.0}] and one.head == {}
    assert three.total() == {"CPU": 4.5} and len(three.bundles) == 5 and three.strategy == "PACK"
    assert pinned.bundles == [{"CPU": 6.0}] and pinned.head == {"big": 1.0}  # one bundle the actors share
    ev = sweep("pipeline=evaluate", "base.overrides={workers: 0}")
    assert ac.placement(ev, ac.validate(ev, ac.sweep_cells(ev), tmp_path)[0]).bundles == [{"CPU": 1.0}]  # no actors
    ev = sweep("pipeline=evaluate", "base.overrides={workers: 2}", "resources={cpus: 0, gpus: 0}")
    with pytest.raises(ConfigError, match="reserve nothing"):
        ac.placement(ev, ac.validate(ev, ac.sweep_cells(ev), tmp_path)[0])
    assert ac.trial_overrides(type(cells[0].config)) == {"ray.placement_group": False}  # actors join the trial's
    ranks = sweep("base.overrides={ray.learner_gpus: 1, learner.workers: 2, rollout.workers: 1, probe.workers: 0}")
    assert ac.placement(ranks, ac.validate(ranks, ac.sweep_cells(ranks), tmp_path)[0]).total()["GPU"] == 2.0


names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)
scalars = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.booleans(), st.text(alphabet="abcxyz -_/", max_size=12), st.none())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(alphabet="abc", min_size=1, max_size=3), inner, max_size=3), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(names, values, min_size=1, max_size=4))
def test_cell_names_are_filesystem_safe(overrides):
    name = ac.cell_name(overrides)
    assert SAFE.match(name) and len(name) <= 100 and "/" not in name and name not in (".", "..")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "a-2", "c"]), max_size=8))
def test_unique_names_stay_unique_and_keep_first_names(items):
    out = ac.unique(items)
    assert len(out) == len(items) and len(set(out)) == len(out)
    for i, (x, y) in enumerate(zip(items, out, strict=True)):
        if x not in items[:i] and x not in out[:i]:
            assert x == y


@settings(max_examples=150, deadline=None)
@given(values)
def test_rendered_overrides_read_back_unchanged(value):
    [arg] = ac.render({"k": value})
    back = OmegaConf.to_container(OmegaConf.from_dotlist([arg]))["k"]
    assert back == value or (isinstance(value, float) and math.isclose(back, value, rel_tol=1e-6))


def test_shipped_sweeps_validate(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # base.config paths are relative to the working directory
    for name, n in (("ablate_smoke.yaml", 6), ("ablate_smoke_builder.yaml", 4), ("ablate_builder.yaml", 32),
                    ("ablate_search_smoke.yaml", 1)):
        cfg = sweep("--config", f"configs/{name}")
        cells = ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)
        assert len(cells) == n and len({c.name for c in cells}) == n
    cfg = sweep("--config=configs/ablate_builder.yaml")
    cell = ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)[0]
    assert cell.config.rollout.backend == "vllm" and ac.placement(cfg, cell).total()["GPU"] >= 4
    search = sweep("--config=configs/ablate_search_smoke.yaml")
    assert search.search == "random" and search.num_samples == 8 and search.scheduler == "asha"


# --- the report ---------------------------------------------------------------------------------------------
RESULTS = {"wall_s": 3.0, "ok": True, "history": [{"reward": 0.1}, {"reward": 0.4}],
           "rows": [{"name": "flat", "f1": 0.5, "f1_ci": [0.4, 0.6]}, {"name": "trained", "f1": 0.7, "rho": 1.2,
                                                                      "rho_ci": [1.0, 1.5]}]}


def test_pick_follows_keys_indexes_and_selectors():
    assert cells.pick(RESULTS, "history.-1.reward") == 0.4
    assert cells.pick(RESULTS, "rows.name=trained.rho") == 1.2
    assert cells.pick(RESULTS, "rows.1.f1") == 0.7
    for missing in ("nope", "rows.name=other.f1", "history.7.reward", "wall_s.x", "history.x"):
        assert cells.pick(RESULTS, missing) is cells.MISSING


def test_cell_metrics_pick_values_and_their_cis():
    got = cells.cell_metrics(RESULTS, ["rows.name=flat.f1", "rows.name=trained.rho", "history.0.reward", "absent"])
    assert got == {"rows.name=flat.f1": 0.5, "rows.name=flat.f1_ci": [0.4, 0.6], "rows.name=trained.rho": 1.2,
                   "rows.name=trained.rho_ci": [1.0, 1.5], "history.0.reward": 0.1}
    assert cells.cell_metrics(RESULTS, []) == {"wall_s": 3.0}  # top-level numbers (not booleans)


def _cells():
    return [{"name": f"b{b}_seed-{s}", "group": f"b{b}", "status": "finished", "attempts": 1, "wall_s": 1.0,
             "metrics": {"f1": 0.1 * b + 0.01 * s}} for b in (2, 8) for s in (1, 2, 3)] + [
        {"name": "broken", "group": "broken", "status": "failed", "attempts": 2, "wall_s": 0.5, "metrics": {},
         "error": "DatasetError: too few people"}]


def test_seed_groups_get_bootstrap_cis():
    grouped = rep.groups(_cells(), ["f1"], n_boot=500)
    assert [g["name"] for g in grouped] == ["b2", "b8"] and grouped[0]["n"] == 3
    m = grouped[1]["metrics"]
    assert m["f1"] == pytest.approx(0.82) and m["f1_ci"][0] <= 0.82 <= m["f1_ci"][1]
    assert 0.81 - 1e-9 <= m["f1_ci"][0] and m["f1_ci"][1] <= 0.83 + 1e-9


def test_summary_table_and_plot(tmp_path):
    cells = _cells()
    grouped = rep.groups(cells, ["f1"], n_boot=200)
    table = rep.summary_table(cells, grouped, ["f1"])
    assert "| b8_seed-3 | finished | 1 | 1.0 | 0.83 |" in table and "| b2 | 3 | 0.22 [" in table
    assert "- broken: DatasetError: too few people" in table
    path = rep.plot(cells, grouped, ["f1"], tmp_path / "p.png", title="t")
    assert path is not None and path.stat().st_size > 1000
    assert rep.plot(cells, grouped, ["absent"], tmp_path / "q.png") is None


# --- end to end: the smoke sweep on local Ray, MLflow server -----------------------------------------------
@pytest.fixture(scope="module")
def smoke(ray_session, mlflow_server, tmp_path_factory):  # noqa: F811 - the imported fixture

    out = tmp_path_factory.mktemp("ablate") / "sweep"
    args = ["--config", str(ROOT / "configs" / "ablate_smoke.yaml"), f"out_dir={out}",
            f"tracking_uri={mlflow_server}", "grid={reader.budget: [2, 8]}", "n_boot=200",
            "cells=[{name: broken, overrides: {people: 10}}]"]  # too few people for the splits: fails at run time
    first = run_sweep(ac.load(args))
    again = run_sweep(ac.load([*args, "retries=0"]))  # the same sweep again: Tune resumes it
    return out, first, again, mlflow_server


@pytest.mark.slow
def test_smoke_sweep_runs_every_cell_and_reports_failures(smoke):
    out, first, _, _ = smoke
    cells = {c["name"]: c for c in first["cells"]}
    good = ["budget-2_seed-1", "budget-2_seed-2", "budget-8_seed-1", "budget-8_seed-2"]
    assert list(cells) == [*good, "broken_seed-1", "broken_seed-2"]
    for name in good:
        c = cells[name]
        assert c["status"] == "finished" and c["attempts"] == 1 and c["wall_s"] > 0 and not c["skipped"]
        assert 0.0 <= c["metrics"]["rows.name=flat.f1"] <= 1.0 and len(c["metrics"]["rows.name=flat.f1_ci"]) == 2
        assert json.loads((out / "cells" / name / "results.json").read_text())["rows"][0]["name"] == "flat"
    for name in ("broken_seed-1", "broken_seed-2"):
        assert cells[name]["status"] == "failed" and cells[name]["attempts"] == 2  # retried once, then reported
        assert cells[name]["error"].endswith("Error: --people must be at least 60 (got 10)")  # the cell's own
        assert len(cells[name]["errors"]) == 2 and not (out / "cells" / name / "results.json").exists()
    assert first["counts"] == {"finished": 4, "failed": 2, "early_stopped": 0, "interrupted": 0, "skipped": 0}
    assert 1 <= first["peak_concurrent"] <= 2  # 1-CPU footprints on 2 CPUs
    f1 = {n: cells[n]["metrics"]["rows.name=flat.f1"] for n in good}
    assert f1["budget-8_seed-1"] > f1["budget-2_seed-1"]  # a reader budget of 2 answers few questions
    groups = {g["name"]: g for g in first["groups"]}
    assert set(groups) == {"budget-2", "budget-8"} and groups["budget-8"]["n"] == 2
    lo, hi = groups["budget-8"]["metrics"]["rows.name=flat.f1_ci"]
    assert lo <= groups["budget-8"]["metrics"]["rows.name=flat.f1"] <= hi
    saved = json.loads((out / "results.json").read_text())
    assert [c["name"] for c in saved["cells"]] == list(cells)
    assert (out / "ablate.png").stat().st_size > 1000 and "budget-8" in (out / "summary.md").read_text()
    from ray.tune import ExperimentAnalysis  # the cells are the trials of a Tune experiment

    trials = ExperimentAnalysis(first["tune"]["experiment"]).trials
    assert len(trials) == 6 and sorted(t.status for t in trials) == ["ERROR"] * 2 + ["TERMINATED"] * 4


@pytest.mark.slow
def test_running_it_again_resumes_and_skips_finished_cells(smoke):
    _, first, again, _ = smoke
    assert again["resumed"] and not first["resumed"]
    status = {c["name"]: (c["status"], c["skipped"]) for c in again["cells"]}
    assert status == {**{c["name"]: ("finished", True) for c in first["cells"] if c["status"] == "finished"},
                      "broken_seed-1": ("failed", False), "broken_seed-2": ("failed", False)}
    assert again["counts"] == {"finished": 4, "failed": 2, "early_stopped": 0, "interrupted": 0, "skipped": 4}
    before = {c["name"]: c for c in first["cells"]}
    for c in again["cells"]:
        if c["skipped"]:  # kept from the first run's trials, not run again
            assert c["metrics"] == before[c["name"]]["metrics"] and c["attempts"] == 1
        else:
            assert c["attempts"] == 1  # this command's retries=0


@pytest.mark.slow
def test_mlflow_has_a_parent_run_and_a_child_per_cell(smoke):
    from mlflow import MlflowClient

    _, first, again, uri = smoke
    client = MlflowClient(uri)
    parent = client.get_run(first["mlflow"]["run_id"])
    assert parent.info.status == "FINISHED" and parent.data.metrics["cells_finished"] == 4.0
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} >= {"results.json", "summary.md",
                                                                             "ablate.png", "config.yaml"}
    children = client.search_runs([first["mlflow"]["experiment_id"]],
                                  f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    by_cell: dict[str, list] = {}
    for run in children:
        by_cell.setdefault(run.data.tags["librarian.cell"], []).append(run)
    assert set(by_cell) == {c["name"] for c in first["cells"]}
    for c in first["cells"]:
        runs = sorted(by_cell[c["name"]], key=lambda r: r.info.start_time)  # one per attempt that reached MLflow
        if c["status"] == "finished":  # the pipeline's own run, tagged, with the sweep's metrics added
            [run] = runs
            assert run.info.status == "FINISHED" and run.data.tags["librarian.status"] == "finished"
            assert json.loads(run.data.tags["librarian.overrides"]) == c["overrides"]
            assert run.data.metrics["sweep.rows.name_flat.f1"] == c["metrics"]["rows.name=flat.f1"]
            assert "flat.f1" in run.data.metrics  # logged by evaluate itself
        else:  # the pipeline's own run, or one the driver made when it failed before its tracker
            assert runs[-1].info.status == "FAILED" and runs[-1].data.tags["librarian.status"] == "failed"
            assert all(r.info.status == "FAILED" for r in runs)  # no attempt left running
    second = client.search_runs([again["mlflow"]["experiment_id"]],
                                f"tags.`mlflow.parentRunId` = '{again['mlflow']['run_id']}'")
    assert sorted(r.data.tags["librarian.cell"] for r in second) == ["broken_seed-1", "broken_seed-2"]


def test_cli_reads_the_config_and_reports_typos(tmp_path, capsys):
    assert main(["ablate", "--config", str(ROOT / "configs" / "ablate_smoke.yaml"), f"out_dir={tmp_path}",
                 "grid={reader.budgt: [1]}"]) == 2
    assert "unknown config key 'reader.budgt'" in capsys.readouterr().err and not list(tmp_path.iterdir())
    assert main(["ablate", "--help"]) == 0 and "max_concurrent" in capsys.readouterr().out
    cfg = load_config(AblateConfig, [f"config={ROOT / 'configs' / 'ablate_smoke.yaml'}", "ray.address=auto"])
    assert cfg.pipeline == "evaluate" and cfg.ray.address == "auto"


def test_every_registered_pipeline_loads(tmp_path):
    for name, entry in registry.PIPELINES.items():
        schema, run, check = entry.load()
        assert callable(run) and isinstance(schema, type), name
        cfg = sweep(f"pipeline={name}")
        [cell] = ac.validate(cfg, ac.sweep_cells(cfg), tmp_path)
        assert isinstance(cell.config, schema) and cell.config.out_dir == str(tmp_path / "cells" / "base")
    assert registry.pipeline("librarian.pipelines.builder.train:run").load()[0].__name__ == "TrainBuilderConfig"
    with pytest.raises(ConfigError, match="cannot load librarian.pipelines.nothing:run"):
        registry.pipeline("librarian.pipelines.nothing:run").load()
