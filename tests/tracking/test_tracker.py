"""The MLflow tracker against a local store and a real tracking server on loopback."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow import MlflowClient  # noqa: TID253

from librarian.tracking import Tracker, TrackingError, flatten, metric_history
from tests.tracking.conftest import free_port


@dataclass
class Inner:
    rank: int = 32
    targets: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])


@dataclass
class Config:
    lr: float = 4e-5
    lora: Inner = field(default_factory=Inner)
    name: str = "demo"


def test_flatten_gives_dotted_keys():
    assert flatten(Config()) == {"lr": "4e-05", "lora.rank": "32", "lora.targets": '["q_proj", "v_proj"]',
                                 "name": "demo"}


def exercise(tracker: Tracker, tmp_path) -> None:
    tracker.log_config(Config())
    for step in range(3):
        tracker.log_metrics({"reward": 0.1 * step, "kl": 0.01, "skipped": float("nan"), "note": "x"}, step)
    tracker.log_table(pa.table({"id": ["a", "b"], "text": ["x", "y"]}), "snapshot_step2")
    tracker.log_jsonl([{"turn": 0, "reward": 1.0}, {"turn": 1, "reward": 0.0}], "trajectories")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [0.0, 0.1, 0.2])
    tracker.log_figure(fig, "reward")
    plt.close(fig)


def check(client: MlflowClient, run_id: str, tmp_path) -> None:
    run = client.get_run(run_id)
    assert run.data.params["lora.rank"] == "32" and run.data.params["lr"] == "4e-05"
    assert [v for _, v in metric_history(client, run_id, "reward")] == pytest.approx([0.0, 0.1, 0.2])
    assert "skipped" not in run.data.metrics and "note" not in run.data.metrics
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "snapshots", "trajectories", "plots"} <= names
    got = client.download_artifacts(run_id, "trajectories/trajectories.jsonl", str(tmp_path))
    assert [json.loads(line)["turn"] for line in open(got)] == [0, 1]
    parquet = client.download_artifacts(run_id, "snapshots/snapshot_step2.parquet", str(tmp_path))

    assert pq.read_table(parquet).column("id").to_pylist() == ["a", "b"]
    assert run.info.status == "FINISHED"


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    """One local store for the module: creating an sqlite store runs MLflow's migrations (seconds)."""
    return tmp_path_factory.mktemp("out")


def test_local_store_under_out_dir(out_dir, tmp_path):
    with Tracker("train_builder", out_dir=out_dir, run_name="job-1") as tracker:
        exercise(tracker, tmp_path)
    assert (out_dir / "mlflow.db").is_file()
    check(tracker.client, tracker.run_id, tmp_path)
    again = Tracker("train_builder", out_dir=out_dir)  # same experiment, a new run
    assert again.experiment_id == tracker.experiment_id and again.run_id != tracker.run_id
    again.finish("KILLED")


@pytest.mark.slow  # the server starts once per session (about 15 s)
def test_tracking_server_on_loopback(mlflow_server, tmp_path):
    tracker = Tracker("train_builder", tracking_uri=mlflow_server, run_name="job-2", tags={"pipeline": "test"})
    exercise(tracker, tmp_path)
    tracker.finish()
    client = MlflowClient(tracking_uri=mlflow_server)
    check(client, tracker.run_id, tmp_path)
    assert client.get_run(tracker.run_id).data.tags["pipeline"] == "test"


def test_a_failed_job_is_marked_failed(out_dir):
    with pytest.raises(ValueError), Tracker("evaluate", out_dir=out_dir) as tracker:
        raise ValueError("boom")
    assert tracker.client.get_run(tracker.run_id).info.status == "FAILED"


def test_an_unreachable_server_is_named():
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TrackingError, match=f"{uri} is unreachable"):
        Tracker("train_builder", tracking_uri=uri)
