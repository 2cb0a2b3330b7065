"""`librarian ablate`: a sweep of a pipeline's configs as a Ray Tune experiment, compared at the end.

Reads top to bottom:
1. the sweep config -> cells (grid product and/or explicit cells, times
   seeds), each cell's pipeline config validated up front (a typo fails here,
   naming the cell and the key); `search: random | optuna` also checks one
   sample of `space`;
2. Ray (a cluster named by `ray.address` or $RAY_ADDRESS is joined, else
   one starts here) and the sweep's MLflow parent run;
3. the Tune experiment `out_dir/tune`: each cell is a trial (the trainable
   in `ablate/trial.py`) in a placement group sized from its config (a
   bundle per actor its session starts), queued by Tune until the cluster
   holds it (an autoscaler may add nodes meanwhile), with Tune's
   concurrency limit (`max_concurrent`; 0: none), retries
   (`FailureConfig`), an optional search algorithm and ASHA scheduler; a
   sweep run again with the same cells
   resumes it (`Tuner.restore`: finished trials are kept, failed and
   interrupted ones run again) unless `rerun`;
4. the chosen metrics of every cell, seed groups with bootstrap CIs,
   `summary.md`, `ablate.png`, `results.json` and `cells/<name>/results.json`,
   all logged to the parent run, the cells' metrics to their child runs.

On a cluster: `ray job submit --working-dir . -- librarian ablate
config=configs/ablate_builder.yaml` (the job's RAY_ADDRESS is joined; see docs/ablate.md).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from librarian.cluster import topology
from librarian.cluster import tune_sweep as ts
from librarian.cluster.ray_init import cluster_address
from librarian.cluster.tune_sweep import DONE_KEY
from librarian.config import ConfigError, to_plain, write_config
from librarian.pipelines.ablate import config as ac
from librarian.pipelines.ablate import report as rep
from librarian.pipelines.ablate import search as srch
from librarian.pipelines.ablate.cells import cell_metrics
from librarian.pipelines.ablate.config import AblateConfig, Cell, load
from librarian.pipelines.ablate.search import trial_cell
from librarian.pipelines.ablate.trial import TrialPlan, cell_config, run_trial
from librarian.pipelines.entry import pipeline_main
from librarian.pipelines.registry import pipeline
from librarian.redact import redact
from librarian.tracking import Tracker

log = logging.getLogger("librarian.ablate")
STATUSES = ("finished", "failed", "early_stopped")
PLAN_KEYS = ("pipeline", "base", "grid", "cells", "seeds", "seed_key", "search", "space", "num_samples",
             "sample_seed", "scheduler", "objective", "asha")  # what a resumed sweep must share


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def sweep_plan(cfg: AblateConfig) -> dict[str, Any]:
    """The settings that define a sweep's trials (a resumed sweep must have the same)."""
    plain = to_plain(cfg)
    return json.loads(json.dumps({k: plain[k] for k in PLAN_KEYS}, default=str))


def resumable(experiment: Path, plan_path: Path, plan: dict[str, Any], rerun: bool) -> bool:
    """True when `experiment` holds this sweep's Tune experiment to resume; a different sweep there raises."""
    from ray import tune

    if rerun or not tune.Tuner.can_restore(str(experiment)):
        return False
    try:
        before = json.loads(plan_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = {}
    changed = sorted(k for k in PLAN_KEYS if before.get(k) != plan[k])
    if changed:
        raise ConfigError(f"{experiment.parent} holds a sweep with other {', '.join(changed)}; run it with "
                          "another out_dir, or rerun=true to start over (the old experiment is kept aside)")
    return True


def cell_records(cfg: AblateConfig, cells: list[Cell], grid: Any, attempts: list[dict], session: str,
                 out: Path) -> list[dict[str, Any]]:
    """One record per trial, in plan order: status, attempts, errors, metrics; finished cells' results saved."""
    order = {c.name: i for i, c in enumerate(cells)}
    records = []
    for result in grid:
        m = result.metrics or {}
        trial_id = str(m.get("trial_id") or "")
        name, group, overrides = trial_cell(result.config, trial_id)
        if not trial_id and result.config.get("space"):  # a sampled trial that never reported: its folder
            name = group = Path(result.path).name
        mine = [a for a in attempts if a["cell"] == name]
        last_session = mine[-1]["session"] if mine else ""
        ran = [a for a in mine if a["session"] == last_session]
        ends = [a for a in ran if a["event"] == "end"]
        status = "failed" if result.error else "finished" if m.get(DONE_KEY) else \
            "early_stopped" if m.get("done") else "interrupted"
        rec: dict[str, Any] = {
            "name": name, "status": status, "group": group, "overrides": overrides,
            "skipped": last_session != session, "attempts": max(len(ends), sum(a["event"] == "start" for a in ran)),
            "wall_s": ends[-1]["end"] - ends[-1]["start"] if ends else 0.0,
            "iterations": int(m.get("training_iteration") or 0), "metrics": {}}
        if status == "finished":
            write_json(out / "cells" / name / "results.json", m["results"])
            rec["metrics"] = cell_metrics(m["results"], cfg.metrics)
        if cfg.search == "optuna" or cfg.scheduler != "fifo":
            objective = cfg.objective.metric
            if isinstance(m.get(objective), int | float):
                rec["metrics"][f"last.{objective}"] = float(m[objective])
        errors = [f"attempt {a['attempt']}: {a['error']}" for a in ends if a.get("error")]
        if errors:
            rec["errors"] = errors
        if status == "failed":
            rec["error"] = errors[-1].split(": ", 1)[1] if errors else str(result.error)
        records.append((order.get(result.config["cell"]["name"], len(order)), name, rec))
    return [rec for *_, rec in sorted(records, key=lambda r: r[:2])]


def run(cfg: AblateConfig) -> dict[str, Any]:
    """Run the sweep; returns the figures also written to results.json."""
    import ray
    from ray import tune

    ac.check(cfg)
    started = time.perf_counter()
    out = Path(cfg.out_dir).resolve()
    schema, _, _ = pipeline(cfg.pipeline).load()
    cells = ac.sweep_cells(cfg)
    ac.validate(cfg, cells, out)  # every key checked before anything starts
    if cfg.space:  # the sampled keys too, with one sample of each range
        drawn = srch.sample(cfg.space, cfg.sample_seed)
        ac.validate(cfg, [Cell(c.name, {**c.overrides, **drawn}, c.group, c.resources) for c in cells], out)
    placements = {c.name: ac.placement(cfg, c) for c in cells}
    experiment, plan_doc = out / "tune", sweep_plan(cfg)
    resume = resumable(experiment, out / "sweep.json", plan_doc, cfg.rerun)
    log.info("1/4 sweep of %s: %d cells%s%s", cfg.pipeline, len(cells),
             f", {cfg.num_samples} {cfg.search} samples each" if cfg.space else "",
             "; resuming its Tune experiment" if resume else "")
    out.mkdir(parents=True, exist_ok=True)
    if experiment.exists() and not resume:
        experiment.rename(out / f"tune.{time.strftime('%Y%m%d-%H%M%S')}")  # kept aside, never deleted
    write_config(out, cfg)
    write_json(out / "sweep.json", plan_doc)
    tracker = Tracker(cfg.experiment, out, cfg.tracking_uri or None, pipeline="ablate",
                      tags={"librarian.sweep": out.name, "librarian.pipeline": cfg.pipeline})
    tracker.log_config(to_plain(cfg))
    exp_name = tracker.client.get_experiment(tracker.experiment_id).name
    joining = cluster_address(cfg.ray.address)
    if joining and not tracker.tracking_uri.startswith(("http://", "https://")):
        log.warning("joining Ray at %r with a local MLflow store (%s): cells on other nodes cannot log to it; "
                    "set tracking_uri to a tracking server", joining, tracker.tracking_uri)
    started_ray = topology.start(cfg.ray, max(p.total().get("CPU", 1.0) for p in placements.values()))
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")  # trials keep the working directory
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")  # save the experiment's state often (resume)
    status = "FAILED"
    children = rep.ChildRuns(tracker)
    try:
        cap = ts.capacity()  # reported only: Tune queues each trial until its placement group fits
        too_big = ts.unfit({name: p.total() for name, p in placements.items()}, cap)
        if too_big and not joining:  # a Ray started here never grows
            raise ConfigError(f"{too_big[0]}: it could never start on the Ray this command started; lower its "
                              "resources")
        for line in too_big:
            log.warning("%s now: Tune queues it until the cluster grows (an autoscaler may add nodes)", line)
        log.info("2/4 Ray resources now %s (%s); MLflow parent run %s in %s", cap,
                 "trials queue until the cluster holds them" if joining else "a local Ray",
                 tracker.run_id, tracker.tracking_uri)
        plan = TrialPlan(cfg.pipeline, [f"config={f}" for f in cfg.base.config]
                         + ac.render(ac.normalize(cfg.base.overrides, "base.overrides")),
                         {**ac.tracking_overrides(schema, tracker.tracking_uri, exp_name), **ac.trial_overrides(schema)},
                         str(out / "cells"), {"LIBRARIAN_PARENT_RUN_ID": tracker.run_id,
                                              "LIBRARIAN_TRACKING_URI": tracker.tracking_uri,
                                              "LIBRARIAN_EXPERIMENT": exp_name}, list(cfg.metrics))
        by_name = {c.name: c for c in cells}

        def resources(config: dict) -> Any:
            cell = by_name[config["cell"]["name"]]
            p = placements[cell.name]
            if config.get("space"):  # sampled keys may change the actors
                overrides = {**cell.overrides, **{k: srch.plain(v) for k, v in config["space"].items()}}
                p = ac.placement(cfg, Cell(cell.name, overrides, cell.group, cell.resources,
                                           cell_config(plan, cell.name, overrides)))
            return ts.placement(p.bundles, p.strategy, p.head)

        trainable = tune.with_resources(tune.with_parameters(run_trial, plan=plan), resources)
        callback = ts.AttemptLog(out / "attempts.jsonl", srch.trial_name, cfg.retries, cfg.timeout_s,
                                 session=tracker.run_id)
        run_config = tune.RunConfig(name=experiment.name, storage_path=str(out), callbacks=[callback], verbose=1,
                                    failure_config=tune.FailureConfig(max_failures=cfg.retries))
        if resume:
            tuner = tune.Tuner.restore(str(experiment), trainable, resume_unfinished=True, restart_errored=True)
            restored = tuner._local_tuner.get_run_config()  # the saved run config: use this command's callbacks
            restored.callbacks, restored.failure_config = run_config.callbacks, run_config.failure_config
        else:
            tuner = tune.Tuner(trainable, param_space=srch.param_space(cfg, cells), tune_config=srch.tune_config(cfg),
                               run_config=run_config)
        log.info("3/4 Tune experiment %s", experiment)
        grid = tuner.fit()
        attempts = ts.read_attempts(out / "attempts.jsonl")
        cell_list = cell_records(cfg, cells, grid, attempts, tracker.run_id, out)
        mine = [a for a in attempts if a["session"] == tracker.run_id and a["event"] == "end"]
        t0 = min((a["start"] for a in mine), default=0.0)
        spans = [ts.Span(a["cell"], a["attempt"], a["start"] - t0, a["end"] - t0) for a in mine]
        for c in cell_list:
            if not c["skipped"]:
                try:
                    children.record(c)
                except Exception as exc:  # noqa: BLE001 - a tracking hiccup must not lose the sweep
                    log.warning("MLflow: could not record cell %s: %s", c["name"], exc)
        names = rep.metric_names(cell_list, cfg.metrics)
        objective = f"last.{cfg.objective.metric}"
        if objective not in names and any(objective in c["metrics"] for c in cell_list):
            names.append(objective)  # the per-step objective where a search or scheduler used it
        grouped = rep.groups(cell_list, names, cfg.n_boot)
        log.info("4/4 summary of %d cells (%d seed groups)", len(cell_list), len(grouped))
        table = rep.summary_table(cell_list, grouped, names)
        counts = {s: sum(c["status"] == s for c in cell_list) for s in (*STATUSES, "interrupted")}
        counts["skipped"] = sum(c["skipped"] for c in cell_list)
        results = {
            "pipeline": cfg.pipeline, "cells": cell_list, "groups": grouped, "metrics": names, "counts": counts,
            "max_concurrent": cfg.max_concurrent, "peak_concurrent": ts.peak_concurrency(spans), "capacity": cap,
            "timeline": [vars(s) for s in spans], "schedule_s": max((s.end for s in spans), default=0.0),
            "wall_s": time.perf_counter() - started, "resumed": resume,
            "tune": {"experiment": str(experiment), "search": cfg.search, "scheduler": cfg.scheduler},
            "mlflow": {"tracking_uri": tracker.tracking_uri, "run_id": tracker.run_id,
                       "experiment_id": tracker.experiment_id},
            "config": redact(to_plain(cfg)),
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
    def code(results: dict[str, Any]) -> int:
        return 0 if results["counts"]["failed"] == 0 and results["counts"]["interrupted"] == 0 else 1

    return pipeline_main("ablate", __doc__, AblateConfig, run, argv, load=load, exit_code=code)
