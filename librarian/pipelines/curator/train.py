"""`librarian train_curator`: supervised curation end to end (paper 001 §V), on KBGym or PhantomWiki.

Reads top to bottom:
1. load the data (`data.source`: a KBGym universe, the official PhantomWiki
   generator's, or a `librarian data` folder) -> the flat store (atomic
   facts, no links) and a search index that follows the store's trace;
2. examine the flat store (B1, "epoch 0"): an independent reader with budget
   M on every exam split, on a frozen snapshot;
3. train: for each epoch, for each train question, a forward pass with the
   reader's tools (budget N1, single-shot answer), the gold and F1 revealed,
   then a backward pass with the curator's tools (budget N2) under the
   uniform instruction; the index embeds the iteration's edits; after each
   epoch the eval split is examined (the per-epoch curve);
4. examine the trained store on the same splits ("trained" = the train
   questions themselves) and compare with the flat store: F1, mean steps,
   rho with a bootstrap CI (only when the flat store's F1 reaches `f1_floor`;
   otherwise the results name the failure), budget exhaustion, coverage;
5. write results.json, results.md, learning_curve.png, the snapshots, the
   trace (every op) and every trajectory (every action) to `out_dir`, and log
   the config, the per-epoch curve, the headline figures and those files to
   MLflow (`experiment`, `tracking_uri`, or MLflow's environment variables).

Any backend drives either role (`reader`, `curator`, `exam_reader` configs);
a scripted role with no policy named gets the one that reads the data's
questions (kbgym_reader / kbgym_curator, or phantom_reader / phantom_curator).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from librarian.config import ConfigError
from librarian.datasets import flat_documents
from librarian.datasets.records import DatasetError
from librarian.datasets.splits import take_balanced
from librarian.evaluation.metrics.coverage import coverage_readings
from librarian.online.policy import PolicyConfig, loop_config, make_policy
from librarian.pipelines import scaffold
from librarian.pipelines.curator.exams import as_rows, compare, freeze, per_class, run_exam, summarize
from librarian.pipelines.curator.report import plot_learning_curve, results_table, template_table
from librarian.pipelines.entry import pipeline_main
from librarian.rewards.scoring import score_answer
from librarian.roles import ToolContext, ToolEnv, kbgym_curator, kbgym_reader, run_episode
from librarian.roles.kbgym_passes import backward_task, forward_task, outcome
from librarian.search.factory import SearchConfig, make_index
from librarian.search.sync import IndexSync
from librarian.workspace import NearDuplicateGuard, Workspace, codec, write_trace

log = logging.getLogger("librarian.train_curator")
EXAM_SPLITS = ("trained", "test_in", "test_out", "eval")


@dataclass
class TrainCuratorConfig(scaffold.DataRunConfig):
    """What `librarian train_curator` runs; override any field as key=value."""

    out_dir: str = "build/train_curator"
    train_questions: int = 150  # n of the train split, classes in turn (-1: all)
    test_in_questions: int = -1
    test_out_questions: int = -1
    eval_questions: int = -1  # 0: no per-epoch eval exam
    exams: list = field(default_factory=lambda: list(EXAM_SPLITS))
    epochs: int = 2
    forward_budget: int = 15  # N1
    backward_budget: int = 30  # N2
    exam_budget: int = 15  # M
    reader_memory: int = 30  # K: last k action-result pairs the reader sees (-1: all)
    curator_memory: int = -1  # -1: full history
    delta: float = 0.03  # non-inferiority margin on F1
    f1_floor: float = 0.5  # rho and non-inferiority are reported only when the flat store's F1 reaches it
    dedup_threshold: float = 0.9  # near-duplicate guard (Jaccard over words) on add / edit
    reader: PolicyConfig = field(default_factory=PolicyConfig)  # scripted: policy kbgym_reader unless named
    curator: PolicyConfig = field(default_factory=PolicyConfig)  # scripted: policy kbgym_curator unless named
    exam_reader: PolicyConfig = field(default_factory=PolicyConfig)
    search: SearchConfig = field(default_factory=lambda: SearchConfig(embedder="none"))
    search_mode: str = "bm25"
    exam_batch: int = 64  # exam episodes generated together
    n_boot: int = 2000
    save_trajectories: bool = True
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else train_curator)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir)


def run(cfg: TrainCuratorConfig) -> dict[str, Any]:
    """Train inside an MLflow run (FAILED if training fails); returns the figures also in results.json."""
    def log_curves(tracker: Any, results: dict[str, Any]) -> None:
        for point in results["eval_curve"]:
            tracker.log_metrics({f"eval.{k}": v for k, v in point.items() if k != "epoch"}, point["epoch"])
        for epoch, f1 in results["training"]["forward_f1_by_epoch"].items():
            tracker.log_metrics({"train.forward_f1": f1}, epoch)
        tracker.log_metrics({k: v for k, v in results.items() if k.endswith("_trained")}, cfg.epochs)

    return scaffold.tracked(cfg, "train_curator", _check, train, log_curves)


def train(cfg: TrainCuratorConfig) -> dict[str, Any]:
    """Train a store on the train split and examine it; returns the figures also written to results.json."""
    out, started = scaffold.start(cfg, _check)
    traj_file = (out / "trajectories.jsonl").open("w", encoding="utf-8") if cfg.save_trajectories else None

    def save(phase: str, epoch: int, qid: str, traj: Any) -> None:
        if traj_file is not None:
            traj_file.write(json.dumps({"phase": phase, "epoch": epoch, "qid": qid, **traj.to_dict()}) + "\n")

    data = scaffold.load_data(cfg, out, ["train"])
    log.info("1/5 %s -> flat store and %s index", data.describe(), cfg.search.backend)
    docs = flat_documents(data.corpus)
    ws = Workspace.from_documents(docs, raw_policy="editable", guard=NearDuplicateGuard(threshold=cfg.dedup_threshold))
    initial = ws.copy()
    index = make_index(cfg.search)
    sync = IndexSync(index, ws)
    sync.end_iteration()
    by_split = {s: data.split(s) for s in ("train", "test_in", "test_out", "eval")}
    train = take_balanced(by_split["train"], cfg.train_questions)
    exam_sets = {"trained": train, "test_in": take_balanced(by_split["test_in"], cfg.test_in_questions),
                 "test_out": take_balanced(by_split["test_out"], cfg.test_out_questions),
                 "eval": take_balanced(by_split["eval"], cfg.eval_questions)}
    exam_sets = {k: v for k, v in exam_sets.items() if v and (k in cfg.exams or k == "eval")}

    reader_memory = None if cfg.reader_memory < 0 else cfg.reader_memory
    reader_role = kbgym_reader(budget=cfg.forward_budget, memory_window=reader_memory)
    exam_role = kbgym_reader(budget=cfg.exam_budget, memory_window=reader_memory)
    curator_role = kbgym_curator(budget=cfg.backward_budget,
                                 memory_window=None if cfg.curator_memory < 0 else cfg.curator_memory)
    scripted_reader, scripted_curator = data.scripted_policies
    reader = make_policy(cfg.reader, scripted_reader)
    curator = make_policy(cfg.curator, scripted_curator, reader)
    examiner = make_policy(cfg.exam_reader, scripted_reader, reader)
    reader_loop, curator_loop, exam_loop = loop_config(cfg.reader), loop_config(cfg.curator), loop_config(cfg.exam_reader)

    def exam(split: str, epoch: int) -> list:
        results, trajs = run_exam(exam_sets[split], freeze(ws), index, examiner, exam_role, exam_loop,
                                  cfg.exam_batch, desc=f"exam {split} (epoch {epoch})", search_mode=cfg.search_mode)
        for r, t in zip(results, trajs, strict=True):
            save(f"exam:{split}", epoch, r.qid, t)
        return results

    log.info("2/5 examining the flat store (B1) on %s", ", ".join(f"{k} ({len(v)})" for k, v in exam_sets.items()))
    flat = {split: exam(split, 0) for split in exam_sets}
    last_eval = flat.get("eval", [])
    eval_curve = [{"epoch": 0, **summarize(last_eval)}] if last_eval else []

    log.info("3/5 training: %d epochs x %d questions (N1=%d, N2=%d)", cfg.epochs, len(train), cfg.forward_budget,
             cfg.backward_budget)
    iterations: list[dict[str, Any]] = []
    tools_used: Counter = Counter()
    live = ToolContext(ws, index, sync, search_mode=cfg.search_mode)
    for epoch in range(1, cfg.epochs + 1):
        for q in tqdm(train, desc=f"epoch {epoch}/{cfg.epochs}", unit="q"):
            version = ws.version
            fwd = run_episode(ToolEnv(reader_role, live, forward_task(q.question)), reader, reader_role, reader_loop)
            f1 = score_answer(q, fwd.answer)
            bwd = run_episode(ToolEnv(curator_role, live, backward_task(q.question, fwd, q.answers, f1)), curator,
                              curator_role, curator_loop)
            sync.end_iteration()  # the iteration's edits are embedded in one batch
            save("forward", epoch, q.id, fwd)
            save("backward", epoch, q.id, bwd)
            tools_used.update(c["name"] for t in bwd.turns for c in t.calls)
            iterations.append({"epoch": epoch, "qid": q.id, "qclass": q.qclass, "forward_f1": f1,
                               "forward_steps": fwd.actions, "outcome": outcome(fwd, f1),
                               "backward_actions": bwd.actions, "backward_end": bwd.end, "ops": ws.version - version,
                               "store_size": len(ws)})
        if "eval" in exam_sets:
            last_eval = exam("eval", epoch)
            eval_curve.append({"epoch": epoch, **summarize(last_eval)})
        log.info("epoch %d: forward F1 %.3f, %d ops so far", epoch,
                 _mean([it["forward_f1"] for it in iterations if it["epoch"] == epoch]), ws.version)

    log.info("4/5 examining the trained store")
    trained = {split: exam(split, cfg.epochs) for split in exam_sets if split != "eval"}
    trained["eval"] = last_eval  # the last point of the eval curve: the same frozen store
    splits: dict[str, Any] = {}
    for split in (s for s in EXAM_SPLITS if s in cfg.exams and s in exam_sets):
        splits[split] = compare(trained[split], flat[split], cfg.delta, cfg.n_boot, cfg.seed, floor=cfg.f1_floor)
        splits[split]["per_class"] = {"flat": per_class(flat[split]), "trained": per_class(trained[split])}
        splits[split]["per_template"] = {"flat": per_class(flat[split], "template"),
                                         "trained": per_class(trained[split], "template")}
    every_flat = list({r.qid: r for rs in flat.values() for r in rs}.values())
    snapshot = freeze(ws)
    cov = coverage_readings(snapshot).as_dict()
    cov["questions"] = {s: coverage_readings(snapshot, [q.support for q in qs if q.support]).questions
                        for s, qs in exam_sets.items() if any(q.support for q in qs)}

    log.info("5/5 writing results to %s", out)
    codec.write_parquet(*initial.state(), out / "initial.parquet")
    codec.write_parquet(*ws.state(), out / "snapshot.parquet")
    write_trace(ws.trace, out / "trace.parquet")
    if traj_file is not None:
        traj_file.close()
    (out / "iterations.json").write_text(json.dumps(iterations, indent=1) + "\n", encoding="utf-8")
    (out / "exams.json").write_text(json.dumps({"flat": {s: as_rows(r) for s, r in flat.items()},
                                                "trained": {s: as_rows(r) for s, r in trained.items()}},
                                               indent=1) + "\n",
                                    encoding="utf-8")
    plot_learning_curve(iterations, eval_curve, out / "learning_curve.png")
    table = results_table(splits, cov)
    notes = [s_["failure"] for s_ in splits.values() if s_.get("failure")]
    if ws.version == 0:
        notes.append("the curator made no edits: the trained store is the flat store, so rho is 1 by construction")
    by_template = {t: v["f1"] for t, v in per_class(every_flat, "template").items()}
    table += "\n\n" + template_table(by_template)
    (out / "results.md").write_text(table + "\n", encoding="utf-8")
    head = splits.get("trained", {})
    results = {
        "rho_trained": head.get("rho"), "f1_trained": head.get("store", {}).get("f1"),
        "f1_flat_trained": head.get("flat", {}).get("f1"), "rho_ci_trained": head.get("rho_ci"),
        "non_inferior_trained": head.get("non_inferior"), "hypothesis_holds_trained": head.get("hypothesis_holds"),
        "f1_floor": cfg.f1_floor, "failure": "; ".join(notes) or None,
        "f1_flat_by_template": by_template, "data": {"source": cfg.data.source, "name": data.name, **data.config},
        "splits": splits, "eval_curve": eval_curve, "coverage": cov,
        "training": {"iterations": len(iterations), "ops_applied": ws.version, "store_size": len(ws),
                     "initial_size": len(initial), "tools_used": dict(tools_used),
                     "forward_f1_by_epoch": {e: _mean([it["forward_f1"] for it in iterations if it["epoch"] == e])
                                             for e in range(1, cfg.epochs + 1)},
                     "forward_steps_by_epoch": {e: _mean([it["forward_steps"] for it in iterations
                                                          if it["epoch"] == e]) for e in range(1, cfg.epochs + 1)},
                     "backward_actions_by_epoch": {e: _mean([it["backward_actions"] for it in iterations
                                                             if it["epoch"] == e]) for e in range(1, cfg.epochs + 1)}},
        "snapshot_hash": ws.content_hash(),
        "backends": {"reader": reader.name, "curator": curator.name, "exam_reader": examiner.name},
        "elapsed_s": time.perf_counter() - started,
        "config": scaffold.config_record(cfg),
    }
    scaffold.write_results(out, results)
    print(table)
    print(f"\ntrained questions: rho {_show(results['rho_trained'])} (95% CI {head.get('rho_ci')}), "
          f"F1 {_show(results['f1_trained'])} vs flat {_show(results['f1_flat_trained'])}; "
          f"{ws.version} ops, store {len(initial)} -> {len(ws)} documents; wrote {out / 'results.json'}")
    return results


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _check(cfg: TrainCuratorConfig) -> None:
    unknown = [s for s in cfg.exams if s not in EXAM_SPLITS]
    if unknown:
        raise ConfigError(f"exams: unknown split(s) {unknown}; choose from {', '.join(EXAM_SPLITS)}")
    for name in ("epochs", "forward_budget", "backward_budget", "exam_budget"):
        if getattr(cfg, name) < (0 if name == "epochs" else 1):
            raise ConfigError(f"{name} must be >= {0 if name == 'epochs' else 1}, got {getattr(cfg, name)}")
    if cfg.reader.backend == "reader":
        raise ConfigError("reader.backend cannot be 'reader'; name a backend (scripted, hf, openai)")
    if cfg.exam_batch < 1:
        raise ConfigError(f"exam_batch must be >= 1, got {cfg.exam_batch}")
    if not 0.0 <= cfg.f1_floor <= 1.0:
        raise ConfigError(f"f1_floor must be in [0, 1], got {cfg.f1_floor}")
    try:
        cfg.data.check()
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None


def main(argv: list[str]) -> int:
    """CLI entry: `librarian train_curator [--config FILE] [key=value ...]`."""
    return pipeline_main("train_curator", __doc__, TrainCuratorConfig, run, argv, check=_check)
