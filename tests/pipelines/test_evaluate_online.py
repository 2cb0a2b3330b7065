"""`librarian evaluate_online`: the prequential stream, its windows and figures, and its config checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from librarian.config import ConfigError, load_config
from librarian.online.versions import VersionStore
from librarian.pipelines.evaluate.online import evaluate, main, run
from librarian.pipelines.evaluate.online_config import EvaluateOnlineConfig, check
from librarian.workspace import Workspace, read_trace, replay
from librarian.workspace import codec as wcodec

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "online_kbgym.yaml")


def _cfg(out: Path, *overrides: str) -> EvaluateOnlineConfig:
    return load_config(EvaluateOnlineConfig, ["--config", CONFIG, f"out_dir={out}", *overrides])


@pytest.fixture(scope="module")
def reduced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("online")
    cfg = _cfg(out, "stream_questions=60", "heldout_questions=20", "window=20", "n_boot=200")
    return out, run(cfg)  # as the CLI runs it: inside an MLflow run (a local store under out_dir)


def test_every_question_is_answered_before_anything_learns_from_it(reduced) -> None:
    out, results = reduced
    records = [json.loads(line) for line in (out / "stream.jsonl").read_text().splitlines()]
    rounds = json.loads((out / "rounds.json").read_text())
    assert len(records) == 60 and len(rounds) == 12
    served = 0  # the version current when each batch arrived: what the rounds before it swapped in
    for k, start in enumerate(range(0, 60, 5)):
        assert {r["version"] for r in records[start:start + 5]} == {served}
        assert rounds[k]["after_question"] == start + 5
        if rounds[k]["decision"] == "swapped":
            served = rounds[k]["version"]
        assert not set(rounds[k]["questions"]) & {r["qid"] for r in records[start + 5:]}  # never a future question
    held = {r["qid"] for r in records if r["held_back"]}
    assert held and not held & {q for r in rounds for q in r["questions"]}
    assert results["final_version"] == served > 0


def test_results_have_windows_cost_crossover_and_the_heldout_split(reduced) -> None:
    out, r = reduced
    assert [w["n"] for w in r["windows"]] == [20, 20, 20]
    for w in r["windows"]:
        assert {"rho", "rho_ci", "f1", "f1_flat", "f1_ci", "f1_flat_ci", "cost", "version"} <= set(w)
        assert w["rho_ci"][0] <= w["rho"] <= w["rho_ci"][1] and 0.0 <= w["f1"] <= 1.0
    assert r["windows"][0]["versions"][0] == 0  # the first questions meet the flat store itself
    versions = [w["version"] for w in r["windows"]]
    assert versions == sorted(versions) and versions[-1] <= r["final_version"]
    cost = r["construction_cost"]
    assert cost["curator_actions"] > 0 and cost["actions"] == cost["curator_actions"] + cost["check_actions"]
    assert cost["rounds"] == 12 and cost["swapped"] == r["final_version"]
    assert set(r["crossover"]) >= {"in_stream", "questions", "saving_per_question_last_window"}
    held = r["heldout"]
    assert held["n"] == 20 and held["split"] == "test_out" and r["rho_heldout"] == held["rho"]
    assert held["version"] == r["final_version"] and held["rho"] < 1.0
    assert (out / "online_curve.png").stat().st_size > 10_000
    assert (out / "mlflow.db").is_file() and (out / "config.yaml").is_file()


def test_the_versions_on_disk_replay_and_serve(reduced) -> None:
    out, r = reduced
    store = VersionStore(out / "workspace")
    assert store.head() == r["final_version"] and store.numbers()[-1] == r["final_version"]
    initial = wcodec.read_parquet(out / "workspace" / "initial.parquet")

    rebuilt = replay(Workspace.from_state(*initial), store.full_trace(store.head()))
    assert rebuilt.content_hash() == r["final_snapshot_hash"]
    assert read_trace(store.paths(1).trace) and store.info(1)["parent"] == 0


def test_bad_configs_are_refused_naming_the_key(tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match="heldout_split 'train' is also in stream_splits"):
        check(_cfg(tmp_path, "heldout_split=train"))
    with pytest.raises(ConfigError, match="curation.holdback"):
        check(_cfg(tmp_path, "curation.holdback=1.0"))
    with pytest.raises(ConfigError, match="feedback must be one of"):
        check(_cfg(tmp_path, "feedback=maybe"))
    assert main(["--config", CONFIG, f"out_dir={tmp_path}", "stream_splits=[nope]"]) == 2
    assert "unknown split" in capsys.readouterr().err


@pytest.mark.slow
def test_the_default_stream_meets_the_figures(tmp_path: Path) -> None:
    """The acceptance figures of docs/online.md: last window rho < 0.95 at F1 >= flat - 0.03; held-out rho < 1."""
    r = evaluate(_cfg(tmp_path, "n_boot=500"))
    last = r["windows"][-1]
    assert len(r["windows"]) == 10 and last["rho"] < 0.95 and last["f1"] >= last["f1_flat"] - 0.03
    assert r["rho_heldout"] < 1.0 and r["headline"]["hypothesis_holds_last_window"]
