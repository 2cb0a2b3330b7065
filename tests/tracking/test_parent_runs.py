"""Parent and child runs: `parent_run_id=`, and the environment a sweep's cell runs in (local sqlite stores)."""

from __future__ import annotations

import json

import pytest

from librarian.tracking import Tracker, TrackingError
from librarian.tracking.tracker import ENV_EXPERIMENT, ENV_PARENT, ENV_TAGS, ENV_URI, PARENT_TAG, env_tags

ENV = (ENV_PARENT, ENV_URI, ENV_EXPERIMENT, ENV_TAGS)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in ENV:
        monkeypatch.delenv(key, raising=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One local store for the module (creating a sqlite store takes seconds)."""
    root = tmp_path_factory.mktemp("store")
    Tracker("setup", root).finish()
    return f"sqlite:///{root / 'mlflow.db'}"


def test_parent_run_id_sets_the_mlflow_tag(tmp_path, store):
    with Tracker("sweep", tmp_path, store) as parent:
        child = Tracker("sweep", tmp_path, store, run_name="cell", parent_run_id=parent.run_id)
        child.finish()
        run = parent.client.get_run(child.run_id)
        assert run.data.tags[PARENT_TAG] == parent.run_id and child.parent_run_id == parent.run_id
        assert PARENT_TAG not in parent.client.get_run(parent.run_id).data.tags


def test_a_cell_process_joins_the_sweep_through_the_environment(tmp_path, monkeypatch, store):
    sweep = Tracker("ablate", tmp_path / "sweep", store)
    monkeypatch.setenv(ENV_PARENT, sweep.run_id)
    monkeypatch.setenv(ENV_URI, sweep.tracking_uri)
    monkeypatch.setenv(ENV_EXPERIMENT, "ablate")
    monkeypatch.setenv(ENV_TAGS, json.dumps({"librarian.cell": "every-1", "librarian.overrides": '{"a": 1}'}))
    # the pipeline asks for its own experiment and a store under its out_dir: the sweep's win
    cell = Tracker("train_builder", tmp_path / "cell", None, tags={"mine": "x"})
    cell.finish()
    assert cell.tracking_uri == sweep.tracking_uri and cell.experiment_id == sweep.experiment_id
    assert not (tmp_path / "cell" / "mlflow.db").exists()
    tags = sweep.client.get_run(cell.run_id).data.tags
    assert tags[PARENT_TAG] == sweep.run_id and tags["librarian.cell"] == "every-1" and tags["mine"] == "x"
    sweep.finish()


def test_tracking_uri_alone_is_a_fallback_store(tmp_path, monkeypatch, store):
    monkeypatch.setenv(ENV_URI, store)
    t = Tracker("y", tmp_path / "other")
    t.finish()
    assert t.tracking_uri == store and t.parent_run_id is None and not (tmp_path / "other" / "mlflow.db").exists()
    monkeypatch.setenv(ENV_URI, "http://127.0.0.1:9")  # nothing listens there
    own = Tracker("y", tmp_path / "own", store)  # an explicit store wins over the environment
    own.finish()
    assert own.tracking_uri == store
    with pytest.raises(TrackingError, match="127.0.0.1:9 is unreachable"):
        Tracker("y", tmp_path / "none")


def test_bad_run_tags_are_named(monkeypatch):
    monkeypatch.setenv(ENV_TAGS, "{not json")
    with pytest.raises(TrackingError, match="LIBRARIAN_RUN_TAGS is not a JSON object"):
        env_tags()
    monkeypatch.setenv(ENV_TAGS, "[1, 2]")
    with pytest.raises(TrackingError, match="must be a JSON object"):
        env_tags()
    monkeypatch.setenv(ENV_TAGS, "")
    assert env_tags() == {}
