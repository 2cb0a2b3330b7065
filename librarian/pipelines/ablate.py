"""`librarian ablate`: a sweep of a pipeline's configs, each cell its own Ray task, compared at the end.

Reads top to bottom:
1. the sweep config -> cells (grid product and/or explicit cells, times
   seeds), each cell's pipeline config validated up front (a typo fails here,
   naming the cell and the key);
2. Ray (`ray.address` '' starts it here, 'auto' joins a cluster) and the
   sweep's MLflow parent run;
3. cells whose `status.json` says finished are skipped (unless `rerun`);
   the others run as Ray tasks through `librarian.cluster.sweep.Scheduler`:
   concurrently while their footprints fit (or up to `max_concurrent`),
   queued otherwise, a failed cell retried up to `retries` times without
   stopping the rest; each cell's pipeline logs its own MLflow run as a
   child of the sweep's run and writes to `out_dir/cells/<name>`, where the
   driver writes `results.json` and `status.json` (atomically);
4. the chosen metrics of every cell, seed groups with bootstrap CIs,
   `summary.md`, `ablate.png` and `results.json` (`cells`), all logged to
   the parent run.

On a cluster: `ray job submit --working-dir . -- librarian ablate
config=configs/ablate_builder.yaml ray.address=auto` (see docs/ablate.md).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from librarian.config import to_plain
from librarian.pipelines.ablate_config import AblateConfig, Cell

log = logging.getLogger("librarian.ablate")
FINISHED, FAILED, SKIPPED, RUNNING = "finished", "failed", "skipped", "running"


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`, or None when it is missing or unreadable (then the cell runs again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_cell(pipeline: str, config: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """In the cell's Ray task: join the sweep's MLflow run through the environment, run the pipeline."""
    from librarian.pipelines.ablate_config import pipeline as lookup

    os.environ.update(env)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    _, run, _ = lookup(pipeline).load()
    results = run(config)
    return json.loads(json.dumps(results, default=str))  # plain data across the object store


def finished(cell_dir: Path) -> dict[str, Any] | None:
    """The results of a cell finished by an earlier run, or None."""
    status = read_json(cell_dir / "status.json")
    if not status or status.get("status") != FINISHED:
        return None
    return read_json(cell_dir / "results.json")


class ChildRuns:
    """The MLflow children of the sweep's run: find a cell's own run, add the sweep's metrics, or make one."""

    def __init__(self, tracker: Any) -> None:
        self.tracker = tracker
        self.client = tracker.client

    def find(self, name: str) -> list[Any]:
        flt = f"tags.`mlflow.parentRunId` = '{self.tracker.run_id}' and tags.`librarian.cell` = '{name}'"
        runs = self.client.search_runs([self.tracker.experiment_id], flt, max_results=50)
        return sorted(runs, key=lambda r: r.info.start_time)

    def record(self, cell: dict[str, Any]) -> str:
        """Log the cell's chosen metrics to its latest run (a driver-made run when the pipeline made none)."""
        from mlflow.entities import Metric, Param

        runs = self.find(cell["name"])
        if runs:
            run_id = runs[-1].info.run_id
        else:  # the pipeline logs nowhere (or failed before its Tracker started)
            tags = {"mlflow.parentRunId": self.tracker.run_id, **cell_tags(cell["name"], cell["overrides"]),
                    "librarian.driver_run": "true"}
            run_id = self.client.create_run(self.tracker.experiment_id, run_name=cell["name"], tags=tags).info.run_id
            params = [Param(k[:250], json.dumps(v)[:6000]) for k, v in cell["overrides"].items()]
            if params:
                self.client.log_batch(run_id, params=params)
            self.client.set_terminated(run_id, "FINISHED" if cell["status"] != FAILED else "FAILED")
        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(f"sweep.{k}"), float(v), now, 0) for k, v in cell["metrics"].items()
                   if not k.endswith("_ci")]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)
        self.client.set_tag(run_id, "librarian.status", cell["status"])
        return run_id


def mlflow_key(name: str) -> str:
    """A metric path as an MLflow metric name (alphanumerics, _ - . space : / only)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)[:250]


def cell_tags(name: str, overrides: Mapping[str, Any]) -> dict[str, str]:
    return {"librarian.cell": name, "librarian.overrides": json.dumps(overrides, sort_keys=True)[:5000]}


def cell_record(cell: Cell, status: str, attempts: int, wall_s: float, results: Mapping[str, Any] | None,
                metric_paths: list[str], error: str = "", errors: list[str] | None = None) -> dict[str, Any]:
    from librarian.pipelines.ablate_report import cell_metrics

    rec: dict[str, Any] = {"name": cell.name, "status": status, "group": cell.group, "overrides": cell.overrides,
                           "attempts": attempts, "wall_s": wall_s,
                           "metrics": cell_metrics(results, metric_paths) if results else {}}
    if error:
        rec["error"] = error
    if errors:
        rec["errors"] = errors
    return rec


def run(cfg: AblateConfig) -> dict[str, Any]:
    """Run the sweep; returns the figures also written to results.json."""
    import ray
    from omegaconf import OmegaConf
    from tqdm import tqdm

    from librarian.cluster import topology
    from librarian.cluster.sweep import Footprint, Job, Scheduler, peak_concurrency
    from librarian.pipelines import ablate_config as ac
    from librarian.pipelines import ablate_report as rep
    from librarian.tracking import Tracker

    ac.check(cfg)
    started = time.perf_counter()
    out = Path(cfg.out_dir).resolve()
    schema, _, _ = ac.pipeline(cfg.pipeline).load()
    cells = ac.plan(cfg)
    ac.validate(cfg, cells, out)  # every key checked before anything starts
    log.info("1/4 sweep of %s: %d cells", cfg.pipeline, len(cells))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)), encoding="utf-8")
    tracker = Tracker(cfg.experiment, out, cfg.tracking_uri or None, run_name=out.name,
                      tags={"librarian.sweep": out.name, "librarian.pipeline": cfg.pipeline})
    tracker.log_config(to_plain(cfg))
    tracking = ac.tracking_overrides(schema, tracker.tracking_uri, tracker.client.get_experiment(
        tracker.experiment_id).name)
    ac.validate(cfg, cells, out, tracking)  # the cells log where the sweep logs
    prints = {c.name: ac.footprint(cfg, c) for c in cells}
    needed = max(p["cpus"] for p in prints.values())
    if cfg.ray.address and not tracker.tracking_uri.startswith(("http://", "https://")):
        log.warning("joining Ray at %r with a local MLflow store (%s): cells on other nodes cannot log to it; "
                    "set tracking_uri to a tracking server", cfg.ray.address, tracker.tracking_uri)
    started_ray = topology.start(cfg.ray, needed)
    status = "FAILED"
    children = ChildRuns(tracker)
    records: dict[str, dict[str, Any]] = {}
    try:
        scheduler = Scheduler(cfg.max_concurrent)
        log.info("2/4 Ray resources %s; MLflow parent run %s in %s", scheduler.cap, tracker.run_id,
                 tracker.tracking_uri)
        jobs = []
        for c in cells:
            cell_dir = out / "cells" / c.name
            done = None if cfg.rerun else finished(cell_dir)
            if done is not None:
                prev = read_json(cell_dir / "status.json") or {}
                records[c.name] = cell_record(c, SKIPPED, int(prev.get("attempts", 0)), float(prev.get("wall_s", 0.0)),
                                              done, cfg.metrics)
                continue
            env = {"LIBRARIAN_PARENT_RUN_ID": tracker.run_id, "LIBRARIAN_TRACKING_URI": tracker.tracking_uri,
                   "LIBRARIAN_EXPERIMENT": tracking.get("experiment") or tracking.get("tracking.experiment")
                   or cfg.experiment, "LIBRARIAN_RUN_TAGS": json.dumps(cell_tags(c.name, c.overrides))}
            p = prints[c.name]
            jobs.append(Job(c.name, run_cell, (cfg.pipeline, c.config, env),
                            Footprint(p["cpus"], p["gpus"], dict(p["custom"]), bool(p["hold"])),
                            cfg.retries, cfg.timeout_s))
        by_name = {c.name: c for c in cells}
        log.info("3/4 %d cells to run, %d finished before (skipped)", len(jobs), len(records))
        bar = tqdm(total=len(cells), initial=len(records), desc="cells", unit="cell")

        def on_start(job: Job, attempt: int) -> None:
            write_json(out / "cells" / job.name / "status.json",
                       {"status": RUNNING, "attempt": attempt, "overrides": by_name[job.name].overrides})

        def on_done(o: Any) -> None:
            cell_dir = out / "cells" / o.name
            if o.status == FINISHED:
                write_json(cell_dir / "results.json", o.value)
            rec = cell_record(by_name[o.name], o.status, o.attempts, o.wall_s, o.value, cfg.metrics, o.error,
                              o.errors)
            write_json(cell_dir / "status.json", {k: v for k, v in rec.items() if k != "metrics"})
            records[o.name] = rec
            try:
                children.record(rec)
            except Exception as exc:  # noqa: BLE001 - a tracking hiccup must not lose the sweep
                log.warning("MLflow: could not record cell %s: %s", o.name, exc)
            bar.update(1)
            log.info("cell %s %s after %d attempt(s) in %.1f s%s", o.name, o.status, o.attempts, o.wall_s,
                     f": {o.error}" if o.error else "")

        scheduler.run(jobs, on_start, on_done)
        bar.close()
        cell_list = [records[c.name] for c in cells]
        names = rep.metric_names(cell_list, cfg.metrics)
        grouped = rep.groups(cell_list, names, cfg.n_boot)
        log.info("4/4 summary of %d cells (%d seed groups)", len(cell_list), len(grouped))
        table = rep.summary_table(cell_list, grouped, names)
        counts = {s: sum(c["status"] == s for c in cell_list) for s in (FINISHED, FAILED, SKIPPED)}
        results = {
            "pipeline": cfg.pipeline, "cells": cell_list, "groups": grouped, "metrics": names, "counts": counts,
            "max_concurrent": cfg.max_concurrent, "peak_concurrent": peak_concurrency(scheduler.spans),
            "capacity": scheduler.cap, "timeline": [vars(s) for s in scheduler.spans],
            "schedule_s": max((s.end for s in scheduler.spans), default=0.0),
            "wall_s": time.perf_counter() - started,
            "mlflow": {"tracking_uri": tracker.tracking_uri, "run_id": tracker.run_id,
                       "experiment_id": tracker.experiment_id},
            "config": to_plain(cfg),
        }
        (out / "summary.md").write_text(table + "\n", encoding="utf-8")
        figure = rep.plot(cell_list, grouped, names, out / "ablate.png", title=f"{cfg.pipeline} sweep")
        results["plot"] = str(figure) if figure else None
        write_json(out / "results.json", results)
        print("\n" + table)
        tracker.log_metrics({f"cells_{k}": float(v) for k, v in counts.items()}
                            | {"wall_s": results["wall_s"], "peak_concurrent": float(results["peak_concurrent"])}, 0)
        for path in [out / "results.json", out / "summary.md", out / "config.yaml", *([figure] if figure else [])]:
            tracker.log_file(path)
        print(f"MLflow parent run {tracker.run_id} in {tracker.tracking_uri}; results: {out / 'results.json'}")
        status = "FINISHED"
        return results
    finally:
        tracker.finish(status)
        if started_ray:
            ray.shutdown()


def main(argv: list[str]) -> int:
    """CLI entry: `librarian ablate [--config FILE] [key=value ...]`; exit 1 when a cell failed."""
    from librarian.pipelines.ablate_config import load
    from librarian.pipelines.entry import pipeline_main

    return pipeline_main("ablate", __doc__, AblateConfig, run, argv, load=load,
                         exit_code=lambda results: 0 if results["counts"][FAILED] == 0 else 1)
