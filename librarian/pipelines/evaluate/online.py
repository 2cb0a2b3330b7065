"""`librarian evaluate_online`: prequential evaluation of a workspace that curates itself from its traffic.

Reads top to bottom:
1. load the data (`data.source`: KBGym or PhantomWiki) and write the flat
   store as a build folder (`out_dir/workspace`: snapshot, empty trace,
   index, workspace.json), version 0; `librarian serve` and `librarian
   rollback` work on it afterwards;
2. the stream (`stream_splits`, shuffled with `seed`) and a held-out split
   never seen in it; the flat store answers both once (the reference);
3. prequential loop: every `curate_every` questions are answered on the
   version being served *before* anything learns from them, logged with
   their trajectories and the feedback (`feedback`: the gold, a correct /
   incorrect verdict, or none), then a curation round runs on a copy
   (`librarian.online.workspace.OnlineWorkspace`, the same code `serve --curate` runs):
   backward passes over the logged questions, the check on held-back ones,
   and a swap to a new version only when the check passes;
4. windows of `window` questions: rho against the flat store, F1 and the
   flat store's F1 with CIs, cost, the version served; the construction cost
   (curator and check actions); the amortization crossover; rho_heldout on
   the held-out split with the last version;
5. write results.json, stream.jsonl (per question), rounds.json (per round,
   with why a round was refused), online_curve.png, config.yaml, and log
   the windows and headline figures to MLflow.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from librarian.config import ConfigError
from librarian.datasets import flat_documents
from librarian.datasets.records import Question
from librarian.datasets.splits import take_balanced
from librarian.online.curation import Logged, Reask, Reasked, Served, held_back
from librarian.online.policy import loop_config, make_policy
from librarian.online.workspace import OnlineWorkspace
from librarian.pipelines import scaffold
from librarian.pipelines.entry import pipeline_main
from librarian.pipelines.evaluate.online_config import EvaluateOnlineConfig, check
from librarian.pipelines.evaluate.online_report import compare, crossover, plot, windows
from librarian.rewards.scoring import score_answer
from librarian.roles import ToolContext, ToolEnv, kbgym_reader, run_episodes
from librarian.roles.kbgym_passes import forward_task
from librarian.search.factory import make_index
from librarian.search.sync import IndexSync
from librarian.workspace import Workspace, codec, write_trace

log = logging.getLogger("librarian.evaluate_online")


def write_flat_build(docs: Sequence[Any], folder: Path, search: Any) -> str:
    """The flat store as a build folder (version 0); returns its snapshot hash."""
    if folder.exists():
        shutil.rmtree(folder)  # this run's own output: a fresh stream starts from version 0
    folder.mkdir(parents=True)
    ws = Workspace.from_documents(docs)
    codec.write_parquet(*ws.state(), folder / "initial.parquet")
    codec.write_parquet(*ws.state(), folder / "snapshot.parquet")
    write_trace(ws.trace, folder / "trace.parquet")
    index = make_index(search)
    IndexSync(index, ws).end_iteration()
    IndexSync(index, ws, ws.version).save(folder / "index")
    manifest = {"snapshot": "snapshot.parquet", "initial": "initial.parquet", "trace": "trace.parquet",
                "index": "index", "export": None, "builder": "flat", "corpus_kind": "dataset",
                "search": {"backend": "embedded", "embedder": search.embedder, "hashing_dim": search.hashing_dim},
                "snapshot_hash": ws.content_hash()}
    (folder / "workspace.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return ws.content_hash()


class Reader:
    """The served reader: a role and a backend answering questions on one version."""

    def __init__(self, cfg: EvaluateOnlineConfig, scripted: str) -> None:
        self.role = kbgym_reader(budget=cfg.reader_budget,
                                 memory_window=None if cfg.reader_memory < 0 else cfg.reader_memory)
        self.backend = make_policy(cfg.reader, scripted)
        self.loop = loop_config(cfg.reader)
        self.mode, self.batch = cfg.search_mode, cfg.batch

    def answer(self, served: Served, questions: Sequence[str]) -> list[Any]:
        """One trajectory per question, all on `served`."""
        ctx = ToolContext(served.workspace, served.index, None, search_mode=self.mode)
        out: list[Any] = []
        with served.lock:
            for start in range(0, len(questions), self.batch):
                envs = [ToolEnv(self.role, ctx, forward_task(q)) for q in questions[start:start + self.batch]]
                out += run_episodes(envs, self.backend, self.role, self.loop)
        return out

    def reask(self) -> Reask:
        def reask(served: Served, items: Sequence[Logged]) -> list[Reasked]:
            trajs = self.answer(served, [i.question for i in items])
            return [Reasked(t.actions, t.answer, t.est_tokens_read) for t in trajs]

        return reask


def stream_of(data: Any, cfg: EvaluateOnlineConfig) -> tuple[list[Question], list[Question]]:
    """The stream (shuffled with `seed` unless `shuffle` is off) and the held-out questions."""
    stream = [q for s in cfg.stream_splits for q in data.split(s)]
    if cfg.shuffle:
        random.Random(cfg.seed).shuffle(stream)
    if cfg.stream_questions >= 0:
        stream = stream[:cfg.stream_questions]
    heldout = take_balanced(data.split(cfg.heldout_split), cfg.heldout_questions)
    if not stream or not heldout:
        raise ConfigError(f"the stream has {len(stream)} and the held-out split {len(heldout)} question(s); both "
                          "need at least one (check stream_splits, heldout_split and the question counts)")
    return stream, heldout


def run(cfg: EvaluateOnlineConfig) -> dict[str, Any]:
    """Evaluate inside an MLflow run; returns the figures also in results.json."""
    return scaffold.tracked(cfg, "evaluate_online", check, evaluate, log_windows)


def log_windows(tracker: Any, results: dict[str, Any]) -> None:
    """Each window's figures at its index, then the headline's at the last."""
    for w in results["windows"]:
        tracker.log_metrics({k: w[k] for k in ("rho", "f1", "f1_flat", "cost", "version") if w[k] is not None},
                            w["window"])
    tracker.log_metrics({k: v for k, v in results["headline"].items() if isinstance(v, int | float)},
                        len(results["windows"]))


def evaluate(cfg: EvaluateOnlineConfig) -> dict[str, Any]:
    """The prequential run (see the module docstring); returns the figures written to results.json."""
    out, started = scaffold.start(cfg, check)
    data = scaffold.load_data(cfg, out)
    stream, heldout = stream_of(data, cfg)
    log.info("1/5 %s -> the flat store as version 0", data.describe())
    docs = flat_documents(data.corpus)
    folder = out / "workspace"
    write_flat_build(docs, folder, cfg.search)
    scripted_reader, scripted_curator = data.scripted_policies
    reader = Reader(cfg, scripted_reader)
    curation = cfg.curation
    if curation.curator.backend == "scripted" and "policy" not in curation.curator.options \
            and curation.role == "kbgym_curator":
        curation = replace(curation, curator=replace(curation.curator,
                                                     options={**curation.curator.options, "policy": scripted_curator}))
    online = OnlineWorkspace(folder, curation, reader.reask())

    log.info("2/5 the flat store answers the stream (%d) and the held-out split (%d)", len(stream), len(heldout))
    flat = online.flat()
    flat_stream = reader.answer(flat, [q.question for q in stream])
    flat_heldout = reader.answer(flat, [q.question for q in heldout])
    for q, t in zip(stream, flat_stream, strict=True):
        online.remember(0, q.id, Reasked(t.actions, t.answer, t.est_tokens_read))

    log.info("3/5 the stream: %d questions, a curation round every %d", len(stream), cfg.curate_every)
    records: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    held: list[Logged] = []
    spent = 0
    pending: list[Logged] = []
    for start in range(0, len(stream), cfg.curate_every):
        chunk = stream[start:start + cfg.curate_every]
        served = online.current
        trajs = reader.answer(served, [q.question for q in chunk])  # answered before anything learns from them
        for q, traj, ft in zip(chunk, trajs, flat_stream[start:start + len(chunk)], strict=True):
            f1 = score_answer(q, traj.answer)
            item = Logged(q.id, q.question, served.version, traj.answer, traj.actions, traj.est_tokens_read, traj,
                          gold=tuple(q.answers) if cfg.feedback == "gold" else (),
                          verdict=(f1 >= 1.0) if cfg.feedback == "verdict" else None, metric=q.metric)
            online.remember(served.version, q.id, Reasked(traj.actions, traj.answer, traj.est_tokens_read))
            is_held = held_back(q.id, curation.holdback)
            (held if is_held else pending).append(item)
            records.append({"i": len(records), "qid": q.id, "qclass": q.qclass, "template": q.template,
                            "version": served.version, "actions": traj.actions, "f1": f1,
                            "tokens": traj.est_tokens_read, "answer": traj.answer, "flat_actions": ft.actions,
                            "flat_f1": score_answer(q, ft.answer), "flat_tokens": ft.est_tokens_read,
                            "held_back": is_held, "construction_so_far": spent})
        report = online.curate(pending, held)
        if not report.retry:  # questions a round could not check yet wait for the next one
            pending = []
        spent += report.curator_actions + report.check_actions
        rounds.append({**report.row(), "check": report.check, "retry": report.retry, "after_question": len(records)})

    log.info("4/5 the held-out split on version %d", online.current.version)
    last = online.current
    final = reader.answer(last, [q.question for q in heldout])
    held_rows = [{"actions": t.actions, "f1": score_answer(q, t.answer), "tokens": t.est_tokens_read,
                  "flat_actions": f.actions, "flat_f1": score_answer(q, f.answer), "flat_tokens": f.est_tokens_read}
                 for q, t, f in zip(heldout, final, flat_heldout, strict=True)]
    heldout_cmp = {**compare(held_rows, cfg.n_boot, cfg.seed), "split": cfg.heldout_split, "version": last.version}
    wins = windows(records, cfg.window, cfg.n_boot, cfg.seed)
    full = [w for w in wins if w["n"] == cfg.window] or wins
    tail = full[-1]
    construction = _construction(rounds)
    cross = crossover(records, construction["actions"], tail, construction["curator_actions"])
    headline = {
        "rho_last_window": tail["rho"], "f1_last_window": tail["f1"], "f1_flat_last_window": tail["f1_flat"],
        "hypothesis_holds_last_window": tail["rho"] is not None and tail["rho"] < 0.95
        and tail["f1"] >= tail["f1_flat"] - cfg.delta,
        "rho_heldout": heldout_cmp["rho"], "f1_heldout": heldout_cmp["f1"], "f1_flat_heldout": heldout_cmp["f1_flat"],
        "heldout_below_1": heldout_cmp["rho"] is not None and heldout_cmp["rho"] < 1.0,
        "versions": last.version, "swaps": construction["swapped"],
    }

    log.info("5/5 writing results to %s", out)
    with (out / "stream.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    (out / "rounds.json").write_text(json.dumps(rounds, indent=1, default=str) + "\n", encoding="utf-8")
    plot(full, heldout_cmp, out / "online_curve.png")
    results = {
        **{k: headline[k] for k in ("rho_last_window", "rho_heldout")},
        "headline": headline, "windows": wins, "construction_cost": construction,
        "crossover": cross, "heldout": heldout_cmp, "rho_heldout_ci": heldout_cmp["rho_ci"],
        "stream": {"questions": len(records), "splits": cfg.stream_splits, "held_back": sum(r["held_back"] for r in records),
                   "feedback": cfg.feedback, "curate_every": cfg.curate_every},
        "data": {"source": cfg.data.source, "name": data.name},
        "workspace": str(folder), "final_version": last.version, "final_snapshot_hash": last.snapshot_hash,
        "backends": {"reader": reader.backend.name, "curator": online.curator.name},
        "elapsed_s": time.perf_counter() - started, "config": scaffold.config_record(cfg),
    }
    scaffold.write_results(out, results)
    print(f"last window: rho {_show(tail['rho'])} {tail['rho_ci']}, F1 {tail['f1']:.3f} vs flat {tail['f1_flat']:.3f}; "
          f"held-out ({cfg.heldout_split}): rho {_show(heldout_cmp['rho'])} {heldout_cmp['rho_ci']}; "
          f"{construction['swapped']} swaps of {construction['rounds']} rounds; construction "
          f"{construction['actions']} actions; crossover after {_show(cross['questions'], 0)} questions")
    return results


def _construction(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    count = {d: sum(r["decision"] == d for r in rounds) for d in ("swapped", "refused", "unchanged", "failed")}
    curator = sum(r["curator_actions"] for r in rounds)
    checks = sum(r["check_actions"] for r in rounds)
    return {"actions": curator + checks, "curator_actions": curator, "check_actions": checks,
            "curator_tokens": sum(r["curator_tokens"] for r in rounds), "ops": sum(r["ops"] for r in rounds
                                                                                  if r["decision"] == "swapped"),
            "wall_s": sum(r["wall_s"] for r in rounds), "rounds": len(rounds), **count,
            "refusals": [r["reason"] for r in rounds if r["decision"] in ("refused", "failed")]}


def _show(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv: list[str]) -> int:
    """CLI entry: `librarian evaluate_online [--config FILE] [key=value ...]`."""
    return pipeline_main("evaluate_online", __doc__, EvaluateOnlineConfig, run, argv, check=check)
