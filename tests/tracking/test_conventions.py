"""MLflow's conventions: its environment variables, standard tags, unique run names, and every pipeline logging
to a real `mlflow server` (started once per session by the `mlflow_server` fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient  # noqa: TID253

from librarian import __version__
from librarian.tracking import Tracker
from librarian.tracking.conventions import (
    GIT_COMMIT_TAG,
    MLFLOW_EXPERIMENT,
    MLFLOW_URI,
    command_line,
    run_name,
)
from librarian.tracking.tracker import ENV_EXPERIMENT, ENV_URI

ROOT = Path(__file__).resolve().parents[2]
LIBRARIAN = Path(sys.executable).parent / "librarian"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in (MLFLOW_URI, MLFLOW_EXPERIMENT, ENV_URI, ENV_EXPERIMENT, "LIBRARIAN_PARENT_RUN_ID"):
        monkeypatch.delenv(key, raising=False)


def _head() -> str | None:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def test_run_names_are_readable_and_unique():
    names = {run_name("evaluate", "build/em") for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith("evaluate-em-") and len(n.split("-")) == 5 for n in names)
    assert run_name("evaluate", "build/evaluate").startswith("evaluate-2")  # no 'evaluate-evaluate-'


def test_the_command_line_tag_reads_as_typed_without_credentials():
    line = command_line(["/venv/bin/librarian", "build", "notes dir", "--backend-arg", "api_key=sk-123456789"])
    assert line.startswith("librarian build 'notes dir' --backend-arg api_key=") and "sk-123456789" not in line


@pytest.mark.slow  # the server starts once per session (about 15 s)
def test_mlflow_variables_choose_the_store_and_the_experiment(mlflow_server, monkeypatch, tmp_path):
    monkeypatch.setenv(MLFLOW_URI, mlflow_server)
    monkeypatch.setenv(MLFLOW_EXPERIMENT, "team-experiment")
    with Tracker("", tmp_path / "em", pipeline="evaluate") as t:
        pass
    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(t.run_id)
    assert t.tracking_uri == mlflow_server and not (tmp_path / "em" / "mlflow.db").exists()
    assert client.get_experiment(run.info.experiment_id).name == "team-experiment"
    assert run.info.run_name.startswith("evaluate-em-") and run.data.tags["librarian.pipeline"] == "evaluate"
    assert run.data.tags["librarian.version"] == __version__ and run.data.tags["librarian.command"]
    if _head():
        assert run.data.tags[GIT_COMMIT_TAG] == _head()
    again = Tracker("", tmp_path / "em", pipeline="evaluate")  # the same out_dir: a second, distinct name
    again.finish()
    assert client.get_run(again.run_id).info.run_name != run.info.run_name
    with Tracker("mine", tmp_path / "em", pipeline="evaluate") as named:  # the config's name wins
        pass
    assert client.get_experiment(named.experiment_id).name == "mine"
    monkeypatch.setenv(ENV_URI, f"sqlite:///{tmp_path / 'own.db'}")  # LIBRARIAN_* overrides MLFLOW_*
    monkeypatch.setenv(ENV_EXPERIMENT, "own")
    with Tracker("", tmp_path / "x", pipeline="evaluate") as own:
        pass
    assert own.tracking_uri.startswith("sqlite:") and own.client.get_experiment(own.experiment_id).name == "own"
    monkeypatch.delenv(MLFLOW_URI)
    monkeypatch.delenv(ENV_URI)
    with Tracker("", tmp_path / "local", pipeline="evaluate") as local:  # no variable: a store under out_dir
        pass
    assert (tmp_path / "local" / "mlflow.db").is_file() and local.tracking_uri.startswith("sqlite:")


def _run_cli(args: list[str], server: str, experiment: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, MLFLOW_URI: server, MLFLOW_EXPERIMENT: experiment}
    return subprocess.run([str(LIBRARIAN), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def _the_run(server: str, experiment: str):
    client = MlflowClient(tracking_uri=server)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no experiment {experiment!r} on the server"
    [run] = client.search_runs([exp.experiment_id])
    return client, run


def _artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    return {a.path for a in client.list_artifacts(run_id, path)}


@pytest.mark.slow
def test_train_curator_logs_to_the_server_the_variables_name(mlflow_server, tmp_path):
    out = tmp_path / "tc"
    args = ["train_curator", "--out", str(out), "people=100", "train_questions=6", "epochs=1",
            "test_in_questions=4", "test_out_questions=4", "eval_questions=4", "n_boot=100"]
    done = _run_cli(args, mlflow_server, "curator-env", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    client, run = _the_run(mlflow_server, "curator-env")
    assert run.info.status == "FINISHED" and not (out / "mlflow.db").exists()
    assert run.data.tags["librarian.command"].startswith("librarian train_curator --out ")
    assert run.data.params["train_questions"] == "6" and run.data.params["epochs"] == "1"
    results = json.loads((out / "results.json").read_text())
    assert run.data.metrics["rho_trained"] == pytest.approx(results["rho_trained"])
    eval_f1 = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "eval.f1"), key=lambda m: m.step)]
    assert eval_f1 == pytest.approx([p["f1"] for p in results["eval_curve"]]) and len(eval_f1) == 2
    assert {"results.json", "results.md", "config.yaml", "plots"} <= _artifacts(client, run.info.run_id)
    assert _artifacts(client, run.info.run_id, "plots") == {"plots/learning_curve.png"}


@pytest.mark.slow
def test_evaluate_logs_without_being_asked(mlflow_server, tmp_path):
    out = tmp_path / "ev"
    args = ["evaluate", "--out", str(out), "people=100", "questions=4", "stores=[flat]", "ablations=[]",
            "gradient=0", "workers=0", "n_boot=100"]
    done = _run_cli(args, mlflow_server, "evaluate-env", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    client, run = _the_run(mlflow_server, "evaluate-env")
    rows = {r["name"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert run.data.metrics["flat.f1"] == pytest.approx(rows["flat"]["f1"])
    assert {"results.json", "results.md", "report.html", "config.yaml"} <= _artifacts(client, run.info.run_id)
    assert "plots/structure.png" in _artifacts(client, run.info.run_id, "plots")
    config = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
    assert "people: 100" in Path(config).read_text()
