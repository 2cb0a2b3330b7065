"""`librarian evaluate`: examine stores with one reader on the same questions and compare them.

Reads top to bottom:
1. load the data (`data.source`: a KBGym universe, the official PhantomWiki
   generator's, or a `librarian data` folder) -> the flat store (atomic
   facts, no links);
2. build the stores: baselines (`flat`, `graphrag`, `hipporag`, `raptor`)
   through workspace ops on copies of the flat store; `curated` from a
   train_curator run (its `snapshot.parquet`, or a run in-process with the
   scripted curator); any snapshot files named in `snapshots`; ablations
   (`flattened`, `shuffled`) of the store named by `ablation_base`;
3. examine every store with the same reader and budget on the same questions
   (and the key-coverage gradient groups), in parallel over questions through
   the Ray probe pool (`workers: 0` runs the plain in-process loop); then each
   extra reader arm in `readers` (e.g. the reactive retrieve-and-read readers
   over BM25, dense and hybrid search) on the flat store, in-process;
4. compare each store with the flat store: F1, mean actions, rho, bootstrap
   CIs (rho and non-inferiority only when the flat store's F1 reaches
   `f1_floor`; otherwise the row names the failure), tokens and files read,
   coverage, structure statistics;
5. write results.json (`rows`), results.md, exams.jsonl, plots (rho against
   coverage, amortization, gradient, structure; PNG), report.html, and log
   the config, each store's figures and those files to MLflow (`experiment`,
   `tracking_uri`, or MLflow's own environment variables; docs/tracking.md).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from librarian.cluster import ProbePool
from librarian.config import ConfigError, to_plain
from librarian.datasets import flat_documents
from librarian.datasets.kbgym.build import SPLITS
from librarian.datasets.kbgym.gradient import gradient_groups
from librarian.datasets.records import DatasetError
from librarian.datasets.splits import take_balanced
from librarian.evaluation.baselines import BASELINES, build_baseline
from librarian.evaluation.baselines.common import written_tokens
from librarian.evaluation.exam import compare, summarize
from librarian.evaluation.metrics.coverage import coverage_readings
from librarian.evaluation.report import markdown_table, plot_all, write_report
from librarian.online.policy import PolicyConfig
from librarian.pipelines import scaffold
from librarian.pipelines.curator.train import TrainCuratorConfig
from librarian.pipelines.curator.train import run as train_curator
from librarian.pipelines.entry import pipeline_main
from librarian.rewards.probe_exam import ExamRunner, ReaderSpec, run_local
from librarian.workspace import Workspace, codec, read_trace
from librarian.workspace.stats import structure_stats

log = logging.getLogger("librarian.evaluate")
BASELINE_STORES = ("flat", "graphrag", "hipporag", "raptor", "autocompaction", "untrained_builder")
ABLATIONS = ("flattened", "shuffled")


@dataclass
class CuratedConfig:
    """Where the `curated` store comes from: a train_curator out_dir or snapshot, else a run in-process."""

    snapshot: str = ""  # a snapshot .parquet, or a train_curator out_dir holding snapshot.parquet
    train_questions: int = 150
    epochs: int = 1
    curator: dict = field(default_factory=lambda: {"backend": "scripted", "options": {"policy": "kbgym_curator"}})
    settings: dict = field(default_factory=dict)  # other train_curator fields, e.g. {backward_budget: 50}


@dataclass
class EvaluateConfig(scaffold.DataRunConfig):
    """What `librarian evaluate` runs; override any field as key=value."""

    out_dir: str = "build/evaluate"
    splits: list = field(default_factory=lambda: ["test_in"])
    questions: int = -1  # per split, classes in turn (-1: all)
    gradient: int = 30  # questions per key-coverage group (0: no gradient; KBGym only)
    stores: list = field(default_factory=lambda: ["flat", "graphrag", "hipporag", "raptor", "curated"])
    ablations: list = field(default_factory=lambda: list(ABLATIONS))
    ablation_base: str = "curated"
    snapshots: dict = field(default_factory=dict)  # extra stores: name -> snapshot .parquet or build folder
    baseline_options: dict = field(default_factory=dict)  # name -> options (e.g. raptor: {embedder: minilm})
    curated: CuratedConfig = field(default_factory=CuratedConfig)
    reader: ReaderSpec = field(default_factory=ReaderSpec)
    readers: dict = field(default_factory=dict)  # extra reader arms on the flat store: row -> fields over `reader`
    workers: int = 2  # Ray probe workers (0: the plain in-process loop)
    chunk: int = 16  # questions per probe task
    n_boot: int = 2000
    f1_floor: float = 0.5  # rho and non-inferiority are reported only when the flat store's F1 reaches it
    save_snapshots: bool = False
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else evaluate)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir)


def _check(cfg: EvaluateConfig) -> None:
    try:
        cfg.data.check()
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
    bad = [s for s in cfg.splits if s not in SPLITS] if cfg.data.source != "path" else []
    if bad or not cfg.splits:
        raise ConfigError(f"splits: unknown or empty {bad or cfg.splits}; choose from {', '.join(SPLITS)}")
    if not 0.0 <= cfg.f1_floor <= 1.0:
        raise ConfigError(f"f1_floor must be in [0, 1], got {cfg.f1_floor}")
    known = (*BASELINE_STORES, "curated")
    bad = [s for s in cfg.stores if s not in known]
    if bad:
        raise ConfigError(f"stores: unknown {bad}; choose from {', '.join(known)} (other stores go in snapshots)")
    if "flat" not in cfg.stores:
        raise ConfigError("stores must include 'flat': rho is measured against the flat store")
    bad = [a for a in cfg.ablations if a not in ABLATIONS]
    if bad:
        raise ConfigError(f"ablations: unknown {bad}; choose from {', '.join(ABLATIONS)}")
    if cfg.ablations and cfg.ablation_base not in (*cfg.stores, *cfg.snapshots):
        raise ConfigError(f"ablation_base {cfg.ablation_base!r} is not among the stores {list(cfg.stores)}")
    bad = [k for k in cfg.baseline_options if k not in BASELINES]
    if bad:
        raise ConfigError(f"baseline_options: unknown baseline(s) {bad}; known: {', '.join(BASELINES)}")
    taken = {*cfg.stores, *cfg.snapshots, *cfg.ablations}
    bad = [r for r in cfg.readers if r in taken]
    if bad:
        raise ConfigError(f"readers: arm name(s) {bad} are already store names; name reader arms apart")
    for spec in reader_arms(cfg).values():
        spec.check()
    if cfg.workers < 0 or cfg.chunk < 1:
        raise ConfigError(f"workers must be >= 0 and chunk >= 1, got {cfg.workers} and {cfg.chunk}")
    cfg.reader.check()


def reader_arms(cfg: EvaluateConfig) -> dict[str, ReaderSpec]:
    """The extra reader arms: each a `ReaderSpec`, the fields it names merged over `cfg.reader`."""
    base = OmegaConf.structured(cfg.reader)
    arms = {}
    for name, fields in cfg.readers.items():
        try:
            arms[name] = OmegaConf.to_object(OmegaConf.merge(base, fields or {}))
        except Exception as exc:  # OmegaConf's errors name the bad key
            raise ConfigError(f"readers.{name}: {exc}") from None
    return arms


def exam_readers(cfg: EvaluateConfig, flat_data: bytes, questions: list, group_qs: list) -> dict[str, tuple]:
    """Each reader arm on the flat store, in-process: name -> (exam, gradient exam, seconds).

    Arms that differ only in search mode share one runner (one index and
    embedding of the store), with the mode swapped between exams.
    """
    runners: dict[str, ExamRunner] = {}
    out = {}
    for name, spec in reader_arms(cfg).items():
        key = repr((spec.search, spec.backend, spec.options, spec.role))
        runner = runners.setdefault(key, ExamRunner(spec))
        runner.spec = spec
        t0 = time.perf_counter()
        exam = run_local(flat_data, questions, spec, runner=runner, chunk=cfg.chunk)
        grad = run_local(flat_data, group_qs, spec, runner=runner, chunk=cfg.chunk) if group_qs else []
        out[name] = (exam, grad, time.perf_counter() - t0)
    return out


def _load_snapshot(target: str) -> Any:
    path = Path(target)
    snap = path / "snapshot.parquet" if path.is_dir() else path
    if not snap.is_file():
        raise ConfigError(f"snapshot {target!r}: no such snapshot file (or folder holding snapshot.parquet)")
    return Workspace.from_state(*codec.read_parquet(snap))


def _curated(cfg: EvaluateConfig, out: Path) -> tuple[Any, int, dict]:
    """The scripted-curator-trained store: (workspace, construction tokens, info)."""
    if cfg.curated.snapshot:
        ws = _load_snapshot(cfg.curated.snapshot)
        trace = Path(cfg.curated.snapshot) / "trace.parquet"
        ops = [e.op for e in read_trace(trace)] if trace.is_file() else []
        return ws, written_tokens(ops), {"source": cfg.curated.snapshot}

    run_dir = out / "train_curator"
    curator = PolicyConfig(backend=cfg.curated.curator.get("backend", "scripted"),
                           options=dict(cfg.curated.curator.get("options", {})))
    tc = TrainCuratorConfig(out_dir=str(run_dir), data=cfg.data, people=cfg.people, seed=cfg.seed,
                            train_questions=cfg.curated.train_questions, epochs=cfg.curated.epochs,
                            exams=["trained"], eval_questions=0, save_trajectories=False, curator=curator)
    unknown = sorted(set(cfg.curated.settings) - set(TrainCuratorConfig.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"curated.settings: unknown train_curator field(s) {unknown}")
    tc = replace(tc, **dict(cfg.curated.settings))
    log.info("training the curated store in-process (%d questions x %d epochs) into %s",
             cfg.curated.train_questions, cfg.curated.epochs, run_dir)
    trained = train_curator(tc)
    ops = [e.op for e in read_trace(run_dir / "trace.parquet")]
    return _load_snapshot(str(run_dir)), written_tokens(ops), {"source": str(run_dir),
                                                                "training": trained.get("training", {})}


def build_stores(cfg: EvaluateConfig, flat_ws: Any, out: Path) -> dict[str, dict[str, Any]]:
    """name -> {workspace, ops, construction_tokens, info}, in the order the table shows them."""
    stores: dict[str, dict[str, Any]] = {}
    for name in cfg.stores:
        t0 = time.perf_counter()
        if name == "curated":
            ws, cost, info = _curated(cfg, out)
            stores[name] = {"workspace": ws, "ops": ws.meta.step, "construction_tokens": cost, "info": info}
        else:
            built = build_baseline(name, flat_ws, **dict(cfg.baseline_options.get(name, {})))
            stores[name] = {"workspace": built.workspace, "ops": built.ops,
                            "construction_tokens": built.construction_tokens, "info": built.info}
        stores[name]["build_s"] = time.perf_counter() - t0
        log.info("built %s: %d ops in %.1f s", name, stores[name]["ops"], stores[name]["build_s"])
    for name, target in cfg.snapshots.items():
        ws = _load_snapshot(str(target))
        stores[name] = {"workspace": ws, "ops": ws.meta.step, "construction_tokens": 0,
                        "info": {"source": str(target)}, "build_s": 0.0}
    for name in cfg.ablations:
        base = stores[cfg.ablation_base]
        built = build_baseline(name, base["workspace"], **dict(cfg.baseline_options.get(name, {})))
        stores[name] = {"workspace": built.workspace, "ops": base["ops"] + built.ops,
                        "construction_tokens": base["construction_tokens"] + built.construction_tokens,
                        "info": {**built.info, "of": cfg.ablation_base}, "build_s": 0.0}
    return stores


def run(cfg: EvaluateConfig) -> dict[str, Any]:
    """Evaluate inside an MLflow run (FAILED if the evaluation fails); returns what results.json holds."""
    _check(cfg)
    out = Path(cfg.out_dir)
    with scaffold.tracker(cfg, "evaluate") as tracker:
        results = evaluate(cfg)
        track(tracker, cfg, out, results["rows"])
    return results


def evaluate(cfg: EvaluateConfig) -> dict[str, Any]:
    """Build, examine and compare the stores; returns what results.json holds."""
    out, started = scaffold.start(cfg, _check)
    source = scaffold.load_data(cfg, out, cfg.splits)
    log.info("1/5 %s -> the flat store", source.describe())
    docs = flat_documents(source.corpus)
    flat_ws = Workspace.from_documents(docs, raw_policy="editable")
    questions = [q for s in cfg.splits for q in take_balanced(source.split(s), cfg.questions)]
    kb = source.kbgym
    groups = gradient_groups(kb, n=cfg.gradient, seed=cfg.seed) if cfg.gradient > 0 and kb is not None else {}
    if cfg.gradient > 0 and kb is None:
        log.info("no key-coverage gradient: it is drawn from KBGym's templates, and the data is %s", source.name)
    group_qs = [q for qs in groups.values() for q in qs]

    log.info("2/5 building stores: %s", ", ".join([*cfg.stores, *cfg.snapshots, *cfg.ablations]))
    stores = build_stores(cfg, flat_ws, out)

    log.info("3/5 examining %d stores on %d questions (+%d gradient) with %s", len(stores), len(questions),
             len(group_qs), f"{cfg.workers} Ray probe workers" if cfg.workers else "the plain loop")
    pool = None
    if cfg.workers > 0:
        pool = ProbePool(cfg.reader, workers=cfg.workers, chunk=cfg.chunk)
    exams: dict[str, list] = {}
    grad_exams: dict[str, list] = {}
    try:
        for name, store in stores.items():
            data = codec.table_to_ipc_bytes(store["workspace"].to_table())
            run_on = (lambda qs, d=data: pool.run(d, qs)) if pool is not None else \
                (lambda qs, d=data: run_local(d, qs, cfg.reader, chunk=cfg.chunk))
            t0 = time.perf_counter()
            exams[name] = run_on(questions)
            grad_exams[name] = run_on(group_qs) if group_qs else []
            store["exam_s"] = time.perf_counter() - t0
            s = summarize(exams[name])
            log.info("exam %s: F1 %.3f, %.2f actions (%.1f s)", name, s["f1"], s["actions"], store["exam_s"])
    finally:
        if pool is not None:
            pool.close()
    if cfg.readers:
        flat_data = codec.table_to_ipc_bytes(stores["flat"]["workspace"].to_table())
        for name, (exam, grad, secs) in exam_readers(cfg, flat_data, questions, group_qs).items():
            spec = reader_arms(cfg)[name]
            stores[name] = {**stores["flat"], "ops": 0, "construction_tokens": 0, "build_s": 0.0, "exam_s": secs,
                            "info": {"store": "flat", "reader": spec.options, "search_mode": spec.search_mode}}
            exams[name], grad_exams[name] = exam, grad
            s = summarize(exam)
            log.info("exam %s (flat store): F1 %.3f, %.2f actions (%.1f s)", name, s["f1"], s["actions"], secs)

    log.info("4/5 comparing with the flat store")
    supports = [q.support for q in questions if q.support]
    rows, structure = [], {}
    for name, store in stores.items():
        ws = store["workspace"]
        cmp = compare(exams[name], exams["flat"], n_boot=cfg.n_boot, seed=cfg.seed, floor=cfg.f1_floor)
        cov = coverage_readings(ws, supports or None)
        structure[name] = structure_stats(ws)
        rows.append({"name": name, **cmp, "coverage_one_hop": cov.one_hop, "coverage_two_hop": cov.two_hop,
                     "question_coverage": cov.questions, "ops": store["ops"],
                     "construction_tokens": store["construction_tokens"], "documents": len(ws),
                     "snapshot_hash": ws.content_hash(), "build_s": store["build_s"], "exam_s": store["exam_s"],
                     "info": store["info"]})
    plots, extra = plot_all(out, rows, exams, grad_exams, groups, structure, cfg.n_boot, cfg.seed)

    log.info("5/5 writing results to %s", out)
    with (out / "exams.jsonl").open("w", encoding="utf-8") as f:
        for name, results in [*exams.items(), *((f"{k}:gradient", v) for k, v in grad_exams.items())]:
            for r in results:
                f.write(json.dumps({"store": name, **r.to_dict()}) + "\n")
    if cfg.save_snapshots:
        for name, store in stores.items():
            codec.write_parquet(*store["workspace"].state(), out / "snapshots" / f"{name}.parquet")
    table = markdown_table(rows)
    (out / "results.md").write_text(table + "\n", encoding="utf-8")
    results = {"rows": rows, **extra, "questions": len(questions), "splits": list(cfg.splits),
               "data": {"source": cfg.data.source, "name": source.name, **source.config}, "f1_floor": cfg.f1_floor,
               "structure": {k: v.as_dict() for k, v in structure.items()},
               "plots": [p.name for p in plots], "elapsed_s": time.perf_counter() - started, "config": scaffold.config_record(cfg)}
    scaffold.write_results(out, results)
    notes = [f"{source.describe()} (seed {cfg.seed}); {len(questions)} questions from "
             f"{', '.join(cfg.splits)}; reader {cfg.reader.backend} {cfg.reader.options} with budget "
             f"{cfg.reader.budget}; ablations are of '{cfg.ablation_base}'."]
    notes += [f"{r['name']}: rho {r['failure']}." for r in rows if r.get("failure")]
    write_report(out / "report.html", "librarian evaluate", rows, plots, notes, extra, to_plain(cfg))
    print(table)
    for note in notes[1:]:
        print(note)
    print(f"\nwrote {out / 'results.json'}, {out / 'report.html'} and {len(plots)} plots "
          f"({time.perf_counter() - started:.0f} s)")
    return results


def track(tracker: Any, cfg: EvaluateConfig, out: Path, rows: list[dict[str, Any]]) -> None:
    """Log the config, each store's figures (as `<store>.<metric>`), plots, results and report to MLflow."""
    tracker.log_config(cfg)
    metrics = {}
    for r in rows:
        for key in ("f1", "actions", "rho", "tokens_read", "files_read", "coverage_one_hop", "construction_tokens"):
            if isinstance(r.get(key), int | float):
                metrics[f"{r['name']}.{key}"] = r[key]
        if r.get("rho_ci"):
            metrics[f"{r['name']}.rho_ci_low"], metrics[f"{r['name']}.rho_ci_high"] = r["rho_ci"]
    tracker.log_metrics(metrics, step=0)
    tracker.log_run_files(out)


def main(argv: list[str]) -> int:
    """CLI entry: `librarian evaluate [--config FILE] [key=value ...]`."""
    return pipeline_main("evaluate", __doc__, EvaluateConfig, run, argv, check=_check)
