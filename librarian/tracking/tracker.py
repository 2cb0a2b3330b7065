"""MLflow tracking: an experiment per pipeline, a run per job, params, per-step metrics, artifacts.

`Tracker(experiment, out_dir=..., pipeline=...)` follows MLflow's conventions
(`conventions.py`): the store is `tracking_uri`, else `LIBRARIAN_TRACKING_URI`,
else `MLFLOW_TRACKING_URI`, else a local store under `out_dir`
(`sqlite:///OUT/mlflow.db`, artifacts in `OUT/mlartifacts`); a tracking
server (`http://host:port`) must answer `/health`. The experiment is
`experiment`, else `LIBRARIAN_EXPERIMENT`, else `MLFLOW_EXPERIMENT_NAME`, else
the pipeline's name. Runs get a unique readable name and the standard tags
(git commit, package version, command line). All calls go through an explicit
`MlflowClient`, so two trackers never share hidden global state.

Parent and child runs: `Tracker(..., parent_run_id=ID)` sets MLflow's
`mlflow.parentRunId` tag. A process started for a sweep's cell (see
`librarian ablate`) gets the environment variables `LIBRARIAN_PARENT_RUN_ID`,
`LIBRARIAN_TRACKING_URI`, `LIBRARIAN_EXPERIMENT` and `LIBRARIAN_RUN_TAGS`
(JSON); every Tracker created there joins the sweep: it logs to that store
and experiment, as a child of that run, with those tags, whatever its config says.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from omegaconf import DictConfig, ListConfig, OmegaConf

from librarian.redact import redact, redact_text
from librarian.tracking import conventions
from librarian.tracking.step_listeners import notify
from librarian.workspace.codec import write_parquet

log = logging.getLogger(__name__)

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch
ENV_PARENT = "LIBRARIAN_PARENT_RUN_ID"
ENV_URI = conventions.ENV_URI
ENV_EXPERIMENT = conventions.ENV_EXPERIMENT
ENV_TAGS = "LIBRARIAN_RUN_TAGS"
PARENT_TAG = "mlflow.parentRunId"
RUN_FILES = ("results.json", "results.md", "report.html")  # `log_run_files`, at the top (config.yaml: `log_config`)


class TrackingError(RuntimeError):
    """The tracking store could not be reached or written; the message names the URI or the artifact."""


def flatten(config: Any, prefix: str = "") -> dict[str, str]:
    """A (nested) config as dotted keys -> strings: dataclasses, OmegaConf objects, dicts and lists."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    else:
        if isinstance(config, DictConfig | ListConfig):
            config = OmegaConf.to_container(config, resolve=True)
    out: dict[str, str] = {}
    if isinstance(config, Mapping):
        for key, value in config.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(config, list | tuple) and any(isinstance(v, Mapping | list | tuple) for v in config):
        for i, value in enumerate(config):
            out.update(flatten(value, f"{prefix}{i}."))
    else:
        text = json.dumps(config) if isinstance(config, list | tuple) else str(config)
        out[prefix.rstrip(".")] = text[:MAX_PARAM_CHARS]
    return out


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """Raise `TrackingError` unless the tracking server at `uri` answers its health check."""
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - http(s) only, checked below
            if resp.status != 200:
                raise TrackingError(redact_text(f"MLflow tracking server {uri} answered {resp.status} on /health"))
    except (urllib.error.URLError, OSError) as exc:
        raise TrackingError(redact_text(f"MLflow tracking server {uri} is unreachable ({exc}); start it or fix "
                                        "tracking_uri (leave it empty for a local store under out_dir)")) from None


def local_uri(out_dir: str | Path) -> tuple[str, str]:
    """The local store for `out_dir`: (tracking URI, artifact location)."""
    root = Path(out_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}", (root / "mlartifacts").as_uri()


def env_tags() -> dict[str, str]:
    """Tags from `LIBRARIAN_RUN_TAGS` (a JSON object); a malformed value raises `TrackingError` naming it."""
    text = os.environ.get(ENV_TAGS, "")
    if not text:
        return {}
    try:
        tags = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrackingError(f"{ENV_TAGS} is not a JSON object ({exc}): {text[:200]!r}") from None
    if not isinstance(tags, dict):
        raise TrackingError(f"{ENV_TAGS} must be a JSON object of tag -> value, got {text[:200]!r}")
    return {str(k): str(v)[:MAX_PARAM_CHARS] for k, v in tags.items()}


class Tracker:
    """One MLflow run in the experiment named after the pipeline; use as a context manager."""

    def __init__(self, experiment: str, out_dir: str | Path = "runs", tracking_uri: str | None = None,
                 run_name: str | None = None, tags: Mapping[str, str] | None = None,
                 system_metrics: bool = False, parent_run_id: str | None = None, pipeline: str | None = None
                 ) -> None:
        from mlflow import MlflowClient

        pipeline = pipeline or experiment
        if not pipeline:
            raise TrackingError("Tracker needs an experiment or a pipeline name")
        tags = {**conventions.standard_tags(pipeline), **dict(tags or {})}
        if parent_run_id is None and os.environ.get(ENV_PARENT):  # a sweep's cell: join the sweep's run
            parent_run_id = os.environ[ENV_PARENT]
            tracking_uri = os.environ.get(ENV_URI) or conventions.tracking_uri(tracking_uri)
            experiment = os.environ.get(ENV_EXPERIMENT) or conventions.experiment_name(experiment, pipeline)
            tags = {**env_tags(), **tags}
        else:
            tracking_uri = conventions.tracking_uri(tracking_uri)
            experiment = conventions.experiment_name(experiment, pipeline)
        run_name = run_name or conventions.run_name(pipeline, out_dir)
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        self.parent_run_id = parent_run_id or None
        if not experiment:
            raise TrackingError("Tracker needs an experiment name (the pipeline's name)")
        artifact_location = None
        if tracking_uri:
            if tracking_uri.startswith(("http://", "https://")):
                check_server(tracking_uri)
            uri = tracking_uri
        else:
            uri, artifact_location = local_uri(out_dir)
        self.tracking_uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        try:
            found = self.client.get_experiment_by_name(experiment)
            exp_id = found.experiment_id if found else self.client.create_experiment(
                experiment, artifact_location=artifact_location)
            self.run_id = self.client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id
        except Exception as exc:  # noqa: BLE001 - MLflow raises many types; name the store
            raise TrackingError(redact_text(f"cannot start an MLflow run in {uri}: {exc}")) from None
        self.experiment_id = exp_id
        self._monitor = None
        if system_metrics:
            self._start_system_metrics()

    def _start_system_metrics(self) -> None:
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self._monitor = SystemMetricsMonitor(self.run_id, sampling_interval=5, samples_before_logging=1,
                                                 tracking_uri=self.tracking_uri)
            self._monitor.start()
        except Exception as exc:  # noqa: BLE001 - system metrics are a convenience
            log.warning("system metrics are off: %s", exc)
            self._monitor = None

    # --- params and metrics -------------------------------------------------
    def log_params(self, config: Any) -> dict[str, str]:
        """The config flattened to dotted keys (nested dataclasses, OmegaConf, dicts)."""
        from mlflow.entities import Param

        params = flatten(redact(config))
        items = [Param(k[:250], v) for k, v in params.items()]
        for at in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[at:at + 100])
        return params

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Per-step metrics; non-numeric and non-finite values are skipped (named in the log)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = []
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                log.debug("metric %s=%r not logged (not a finite number)", key, value)
                continue
            items.append(Metric(key, float(value), now, int(step)))
        for at in range(0, len(items), MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=items[at:at + MAX_BATCH])

        notify({m.key: m.value for m in items}, int(step))  # e.g. a sweep's trial reporting to Ray Tune

    def set_tags(self, tags: Mapping[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    # --- artifacts -------------------------------------------------------------
    def log_file(self, path: str | Path, folder: str | None = None) -> None:
        path = Path(path)
        if not path.exists():
            raise TrackingError(f"cannot log artifact {path}: it does not exist")
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), folder)
        else:
            self.client.log_artifact(self.run_id, str(path), folder)

    def _write(self, name: str, write: Any, folder: str | None) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            write(path)
            self.client.log_artifact(self.run_id, str(path), folder)

    def log_config(self, config: Any, name: str = "config.yaml") -> None:
        """The resolved config as YAML (and its flattened params)."""
        config = redact(config)  # credentials never reach the params or the YAML
        self.log_params(config)
        conf = OmegaConf.structured(config) if dataclasses.is_dataclass(config) else OmegaConf.create(config)
        self._write(name, lambda p: p.write_text(OmegaConf.to_yaml(conf, resolve=True)), None)

    def log_table(self, table: Any, name: str, folder: str = "snapshots") -> None:
        """A pyarrow Table (a workspace snapshot, a trace) as Parquet."""
        self._write(name if name.endswith(".parquet") else name + ".parquet", lambda p: pq.write_table(table, p),
                    folder)

    def log_workspace(self, workspace: Any, name: str, folder: str = "snapshots") -> None:
        """A workspace's snapshot (tombstones included) as Parquet, in the workspace codec's format."""
        nodes, meta = workspace.state()
        self._write(name if name.endswith(".parquet") else name + ".parquet",
                    lambda p: write_parquet(nodes, meta, p), folder)

    def log_jsonl(self, records: Iterable[Any], name: str, folder: str = "trajectories") -> int:
        """Records (dicts, or objects with `to_dict()` such as trajectories) as JSON lines; returns the count."""
        rows = [r.to_dict() if hasattr(r, "to_dict") else r for r in records]
        self._write(name if name.endswith(".jsonl") else name + ".jsonl",
                    lambda p: p.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows)), folder)
        return len(rows)

    def log_figure(self, figure: Any, name: str, folder: str = "plots") -> None:
        """A matplotlib figure as PNG."""
        self._write(name if name.endswith(".png") else name + ".png",
                    lambda p: figure.savefig(p, dpi=100, bbox_inches="tight"), folder)

    def log_text(self, text: str, name: str, folder: str | None = None) -> None:
        self._write(name, lambda p: p.write_text(text), folder)

    def log_run_files(self, out_dir: str | Path) -> list[Path]:
        """A run's standard outputs in `out_dir`, those that exist: results.json, results.md and report.html at
        the top, every PNG under `plots/`. Returns what it logged. (The resolved config, credentials masked,
        is `log_config`'s.)"""
        out = Path(out_dir)
        logged = [p for p in (out / n for n in RUN_FILES) if p.is_file()]
        for path in logged:
            self.client.log_artifact(self.run_id, str(path))
        plots = sorted(out.glob("*.png"))
        for path in plots:
            self.client.log_artifact(self.run_id, str(path), "plots")
        return logged + plots

    def artifact_uri(self) -> str:
        return self.client.get_run(self.run_id).info.artifact_uri

    # --- lifecycle ---------------------------------------------------------------
    def finish(self, status: str = "FINISHED") -> None:
        """End the run (FINISHED, FAILED or KILLED)."""
        if self._monitor is not None:
            self._monitor.finish()
            self._monitor = None
        self.client.set_terminated(self.run_id, status=status)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.finish("FAILED" if exc_type else "FINISHED")


def metric_history(client_or_tracker: Any, run_id: str, key: str) -> Sequence[tuple[int, float]]:
    """(step, value) pairs of a metric, in step order (for tests and reports)."""
    client = getattr(client_or_tracker, "client", client_or_tracker)
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
