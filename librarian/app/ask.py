"""`librarian ask WORKSPACE [QUESTION]`: answer questions over a built workspace with a reader role.

Readers: `kbgym` (search / read(id) / answer; default backend: the scripted
KBGym reader), `librarian` (the Librarian answerer: list / read(path) /
answer; default backend: hf with the bundled SmolLM2), `jam` (the JAM
researcher: open / search / browse in rounds, then finalize; default backend:
the scripted researcher; its answer is the context it finalized, its sources
the raw sessions). Any backend by name (`--backend`, options with
`--backend-arg key=value`). Prints each answer, the files the reader read and
their provenance paths back to raw documents; `--trace` prints every tool
call. With `--questions FILE` (or `-` for stdin) it answers in batch and
writes one JSON line per question (`--jsonl`); `--out DIR` writes
`answers.jsonl` and `results.json` (mean F1 where golds are known, files
read, actions, tokens read).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from librarian.app.corpus import AskItem, InputError, load_questions
from librarian.app.provenance import provenance_paths
from librarian.app.workspace_dir import OpenedWorkspace, open_workspace
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError

log = logging.getLogger("librarian.ask")
READERS = ("kbgym", "librarian", "jam")
READ_TOOLS = frozenset({"read", "open", "browse"})
DEFAULT_BACKEND = {"kbgym": ("scripted", {"policy": "kbgym_reader"}), "librarian": ("hf", {"model": "smollm2"}),
                   "jam": ("scripted", {"policy": "jam_researcher"})}


@dataclass
class AskConfig:
    """How questions are answered."""

    reader: str = "kbgym"
    backend: str | None = None  # default per reader (DEFAULT_BACKEND)
    backend_args: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None  # the role's budget when None
    batch: int = 32  # episodes generated together
    max_new_tokens: int = 256
    search_mode: str = "bm25"


def make_role(reader: str, budget: int | None):
    """The reader role for `--reader`."""
    from librarian.roles import kbgym_reader, librarian_answerer
    from librarian.roles.definitions import jam_researcher

    if reader == "kbgym":
        return kbgym_reader() if budget is None else kbgym_reader(budget=budget)
    if reader == "librarian":
        return librarian_answerer() if budget is None else librarian_answerer(budget=budget)
    if reader == "jam":
        return jam_researcher() if budget is None else jam_researcher(budget=budget)
    raise InputError(f"unknown reader {reader!r}; choose one of {', '.join(READERS)}")


def make_reader_backend(cfg: AskConfig):
    from librarian.models import make_backend

    name, args = DEFAULT_BACKEND.get(cfg.reader, ("scripted", {}))
    if cfg.backend is not None:
        name, args = cfg.backend, {}
    return make_backend(name, **{**args, **cfg.backend_args})


def files_read(src: Any, traj: Any) -> list[str]:
    """Paths of the nodes whose text a read/open call showed, first-read order."""
    ids = [i for t in traj.turns if any(c["name"] in READ_TOOLS for c in t.calls) for i in t.nodes_touched]
    paths = []
    for node_id in dict.fromkeys(ids):
        node = src.get(node_id)
        if node is not None:
            paths.append(node.path)
    return paths


def record(item: AskItem, traj: Any, src: Any, with_trace: bool) -> dict[str, Any]:
    """One question's JSON record: answer, score, files read, provenance, costs (and the trace)."""
    from librarian.datasets.scoring import score
    from librarian.roles.researcher_tools import JAM_RESEARCHER, finalized

    read = files_read(src, traj)
    rec: dict[str, Any] = {"id": item.id, "question": item.question, "answer": traj.answer, "end": traj.end,
                           "files_read": read, "nodes_seen": len(traj.nodes_touched), "actions": traj.actions,
                           "est_tokens_read": traj.est_tokens_read}
    if traj.role == JAM_RESEARCHER:  # the answer is the finalized context; its sources are raw sessions
        result = finalized(traj.answer)
        rec["answer"] = result.context if traj.answer is not None else None
        rec["sources"] = [n.path if (n := src.get(i)) is not None else i for i in result.sources]
        rec["cited"], rec["sufficient"] = list(result.cited), result.sufficient
    prov = {}
    for path in read:
        node = src.by_path(path)
        if node is not None and node.kind != "raw":
            prov[path] = provenance_paths(src, node.id, max_paths=3)
    rec["provenance"] = prov
    if item.answers:
        rec["gold"] = list(item.answers)
        try:
            rec["f1"] = score(item.metric, traj.answer or "", list(item.answers))
        except ValueError as exc:
            rec["f1"] = None
            rec["score_error"] = str(exc)
    if with_trace:
        rec["trace"] = [{"calls": t.calls, "errors": t.errors, "observation": t.observation} for t in traj.turns]
    return rec


def answer(opened: OpenedWorkspace, items: Sequence[AskItem], cfg: AskConfig, backend: Any = None,
           with_trace: bool = False) -> list[dict[str, Any]]:
    """Answer `items` over an opened workspace; returns one record per item."""
    from tqdm import tqdm

    from librarian.models.base import SamplingParams
    from librarian.roles import LoopConfig, ToolContext, ToolEnv, run_episodes
    from librarian.roles.kbgym_passes import forward_task
    from librarian.roles.researcher import ResearchEnv

    role = make_role(cfg.reader, cfg.budget)
    if cfg.reader in ("kbgym", "jam") and opened.index is None:
        raise InputError(f"{opened.snapshot_path}: the {cfg.reader} reader searches, but no saved index was found "
                         "beside the snapshot; build the workspace with `librarian build` or use --reader librarian")
    backend = backend if backend is not None else make_reader_backend(cfg)
    mode = cfg.search_mode
    if cfg.reader == "jam" and getattr(opened.index, "embedder", None) is not None:
        mode = "hybrid"  # the researcher's search is BM25 + dense when the index has vectors
    ctx = ToolContext(opened.source, index=opened.index, search_mode=mode)
    env_type = ResearchEnv if cfg.reader == "jam" else ToolEnv
    loop = LoopConfig(SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0))
    out: list[dict[str, Any]] = []
    with tqdm(total=len(items), desc=f"asking ({cfg.reader})", unit="question", disable=len(items) < 2) as bar:
        for start in range(0, len(items), cfg.batch):
            chunk = items[start:start + cfg.batch]
            envs = [env_type(role, ctx, item.question if cfg.reader == "jam" else forward_task(item.question))
                    for item in chunk]
            for item, traj in zip(chunk, run_episodes(envs, backend, role, loop), strict=True):
                out.append(record(item, traj, opened.source, with_trace))
            bar.update(len(chunk))
    return out


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over a batch: F1 (over questions with golds), files read, actions, tokens read."""
    n = len(records)
    scored = [r["f1"] for r in records if r.get("f1") is not None]
    return {
        "questions": n,
        "scored": len(scored),
        "f1": sum(scored) / len(scored) if scored else None,
        "answered": sum(1 for r in records if r["answer"] is not None),
        "files_read_mean": sum(len(r["files_read"]) for r in records) / n if n else 0.0,
        "nodes_seen_mean": sum(r["nodes_seen"] for r in records) / n if n else 0.0,
        "actions_mean": sum(r["actions"] for r in records) / n if n else 0.0,
        "est_tokens_read_mean": sum(r["est_tokens_read"] for r in records) / n if n else 0.0,
    }


def print_record(rec: dict[str, Any], with_trace: bool, stream: Any = None) -> None:
    """The human-readable answer block."""
    w = (stream or sys.stdout).write
    w(f"Q: {rec['question']}\nA: {rec['answer'] if rec['answer'] is not None else '(no answer: ' + rec['end'] + ')'}")
    if "f1" in rec and rec["f1"] is not None:
        w(f"   (gold: {', '.join(rec['gold'])}; F1 {rec['f1']:.2f})")
    w(f"\nfiles read ({len(rec['files_read'])}, {rec['actions']} actions):\n")
    for path in rec["files_read"]:
        w(f"  {path}\n")
        for chain in rec["provenance"].get(path, []):
            w(f"    provenance: {' -> '.join(chain)}\n")
    if "sources" in rec:
        w(f"sources ({'sufficient' if rec['sufficient'] else 'not judged sufficient'}): "
          f"{', '.join(rec['sources']) or 'none'}\n")
    if with_trace:
        w("trace:\n")
        for i, turn in enumerate(rec.get("trace", []), start=1):
            for call in turn["calls"]:
                w(f"  {i}. {call['name']}({json.dumps(call['arguments'], ensure_ascii=False)})\n")
            for err in turn["errors"]:
                w(f"  {i}. error ({err['kind']}): {err['message']}\n")
            seen = turn["observation"].replace("\n", " | ")
            w(f"     -> {seen[:300]}{'...' if len(seen) > 300 else ''}\n")
    w("\n")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="librarian ask", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workspace", help="a folder written by `librarian build`, or a snapshot .parquet")
    p.add_argument("question", nargs="?", help="one question (else --questions)")
    p.add_argument("--questions", help="questions: a `librarian data` folder, .parquet, .jsonl, .txt, or - for stdin")
    p.add_argument("--split", help="with a dataset: only this split (e.g. test_in)")
    p.add_argument("--limit", type=int, help="answer only the first N questions")
    p.add_argument("--reader", default="kbgym", choices=READERS)
    p.add_argument("--backend", help="policy backend: scripted, hf, openai, vllm (default per reader)")
    p.add_argument("--backend-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--budget", type=int, help="the reader's action budget (default: the role's)")
    p.add_argument("--embedder", help="override the index's embedder (none: BM25 only, no model load)")
    p.add_argument("--trace", action="store_true", help="print every tool call")
    p.add_argument("--jsonl", help="write one JSON line per question here ('-' for stdout)")
    p.add_argument("--out", help="folder for answers.jsonl and results.json")
    return p


def main(argv: Sequence[str]) -> int:
    """CLI entry."""
    from librarian.app.build import _kv

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    args = parser().parse_args(list(argv))
    started = time.perf_counter()
    try:
        if args.question:
            items = [AskItem("q1", args.question)]
        elif args.questions:
            items = load_questions(args.questions, args.split)
        else:
            raise InputError("give a question, or --questions FILE (or - for stdin)")
        if args.limit is not None:
            items = items[: args.limit]
        cfg = AskConfig(reader=args.reader, backend=args.backend, backend_args=_kv(args.backend_arg),
                        budget=args.budget)
        make_role(cfg.reader, cfg.budget)
        embedder = args.embedder if args.embedder is not None else (None if cfg.search_mode == "bm25" else None)
        opened = open_workspace(args.workspace, embedder=embedder if embedder is not None else "none")
        records = answer(opened, items, cfg, with_trace=args.trace or bool(args.jsonl) or bool(args.out))
    except (InputError, WorkspaceError, SnapshotFormatError) as exc:
        print(f"librarian ask: {exc}", file=sys.stderr)
        return 2
    to_stdout = args.jsonl == "-"
    for rec in records:
        if not to_stdout:
            print_record(rec, args.trace)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if to_stdout:
        sys.stdout.write(lines)
    elif args.jsonl:
        Path(args.jsonl).write_text(lines, encoding="utf-8")
    summary = summarise(records)
    if len(records) > 1 and not to_stdout:
        f1 = "n/a" if summary["f1"] is None else f"{summary['f1']:.3f}"
        print(f"{summary['questions']} questions: mean F1 {f1} over {summary['scored']} with golds; "
              f"{summary['files_read_mean']:.1f} files read and {summary['actions_mean']:.1f} actions on average")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "answers.jsonl").write_text(lines, encoding="utf-8")
        results = {**summary, "wall_s": time.perf_counter() - started, "workspace": str(opened.snapshot_path),
                   "config": {"reader": cfg.reader, "backend": cfg.backend or DEFAULT_BACKEND[cfg.reader][0],
                              "backend_args": cfg.backend_args, "budget": cfg.budget,
                              "questions": args.questions or "(argument)", "split": args.split, "limit": args.limit}}
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0
