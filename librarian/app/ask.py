"""`librarian ask WORKSPACE [QUESTION]`: answer questions over a built workspace with a reader role.

Readers: `auto` (default: `kbgym` on a KBGym/PhantomWiki fact store, `jam`
on anything else, such as a folder of notes), `kbgym` (search / read(id) /
answer; default backend: the scripted KBGym reader), `librarian` (the
Librarian answerer: list / read(path) / answer; default backend: hf with the
bundled SmolLM2), `jam` (the JAM researcher: open / hybrid search / browse in
rounds, then finalize; default backend: the scripted researcher; its answer
is the passages it found, each with its file and line, its sources the raw
files). With `jam` and a model backend (`--backend openai|hf|vllm`), the
scripted researcher finds the passages and the model writes the answer from
them (`--llm-researcher`: the model runs the researcher's tools itself). Any
backend by name (`--backend`, options with `--backend-arg key=value`); model
runs show their progress on stderr, and a run whose model made no valid tool
call exits 1. Prints each answer, the files the reader read and
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
from pathlib import Path
from typing import Any

from librarian.answering.answer import answer
from librarian.answering.config import DEFAULT_BACKEND, READERS, AskConfig, AskItem
from librarian.answering.readers import make_role, reader_of_manifest, resolve_reader
from librarian.answering.records import summarise
from librarian.app.ask_printing import print_record
from librarian.app.build import backend_args
from librarian.app.corpus import load_questions
from librarian.app.workspace_dir import OpenedWorkspace, open_workspace, read_manifest
from librarian.config import InputError
from librarian.models.base import BackendError
from librarian.redact import redact
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="librarian ask", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workspace", help="a folder written by `librarian build`, or a snapshot .parquet")
    p.add_argument("question", nargs="?", help="one question (else --questions)")
    p.add_argument("--questions", help="questions: a `librarian data` folder, .parquet, .jsonl, .txt, or - for stdin")
    p.add_argument("--split", help="with a dataset: only this split (e.g. test_in)")
    p.add_argument("--limit", type=int, help="answer only the first N questions")
    p.add_argument("--reader", default="auto", choices=READERS,
                   help="auto (default): kbgym on a KBGym/PhantomWiki store, jam (the researcher) on anything else")
    p.add_argument("--backend", help="policy backend: scripted, hf, openai, vllm (default per reader); with the jam "
                   "reader a model backend writes the answer from the passages the researcher found")
    p.add_argument("--llm-researcher", action="store_true",
                   help="jam reader: the --backend model runs the researcher's tools itself")
    p.add_argument("--backend-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--budget", type=int, help="the reader's action budget (default: the role's)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="a model's longest message (default 256)")
    p.add_argument("--embedder", help="override the index's embedder (none: BM25 only, no model load)")
    p.add_argument("--trace", action="store_true", help="print every tool call")
    p.add_argument("--jsonl", help="write one JSON line per question here ('-' for stdout)")
    p.add_argument("--out", help="folder for answers.jsonl and results.json")
    return p


def main(argv: Sequence[str]) -> int:
    """CLI entry: the questions, the reader, the workspace, the answers; then printed, and written to --jsonl and
    --out."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    args = parser().parse_args(list(argv))
    started = time.perf_counter()
    try:
        items = questions(args)
        cfg = ask_config(args)
        opened = open_for(args, cfg)
        cfg.reader = resolve_reader(cfg.reader, opened)
        records = answer(opened, items, cfg, with_trace=args.trace or bool(args.jsonl) or bool(args.out))
    except (InputError, WorkspaceError, SnapshotFormatError) as exc:
        print(f"librarian ask: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"librarian ask: the model backend failed: {exc}", file=sys.stderr)
        return 1
    lines = show(records, args)
    if args.out:
        write_outputs(Path(args.out), records, lines, results_record(records, cfg, opened, args, started))
    failed = [r for r in records if r.get("failure")]
    if failed:
        print(f"librarian ask: {len(failed)} of {len(records)} question(s) got no answer: {failed[0]['failure']} "
              "(--trace shows the model's turns)", file=sys.stderr)
        return 1
    return 0


def questions(args: argparse.Namespace) -> list[AskItem]:
    """The question argument, or the questions of --questions (--split, --limit)."""
    if args.question is not None:
        if not args.question.strip():
            raise InputError("the question is empty; ask something, or use --questions FILE")
        items = [AskItem("q1", args.question.strip())]
    elif args.questions:
        items = load_questions(args.questions, args.split)
    else:
        raise InputError("give a question, or --questions FILE (or - for stdin)")
    return items[: args.limit] if args.limit is not None else items


def ask_config(args: argparse.Namespace) -> AskConfig:
    """The reader and its backend from the flags; a build folder's record decides `auto` before any model loads."""
    cfg = AskConfig(reader=args.reader, backend=args.backend, backend_args=backend_args(args.backend_arg),
                    budget=args.budget, llm_researcher=args.llm_researcher, max_new_tokens=args.max_new_tokens)
    if cfg.reader == "auto" and Path(args.workspace).is_dir():  # decided before any model is loaded
        cfg.reader = reader_of_manifest(read_manifest(Path(args.workspace))) or "auto"
    if cfg.reader != "auto":
        make_role(cfg.reader, cfg.budget)
    return cfg


def open_for(args: argparse.Namespace, cfg: AskConfig) -> OpenedWorkspace:
    """The workspace with the index the reader searches: the researcher's with the build's embedder (hybrid),
    the KBGym reader's BM25 only (`--embedder` overrides)."""
    embedder = args.embedder if args.embedder is not None else (None if cfg.reader in ("auto", "jam") else "none")
    return open_workspace(args.workspace, embedder=embedder)


def show(records: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Print each answer (or the JSON lines, `--jsonl -`) and the batch's means; write `--jsonl FILE`. The JSON
    lines."""
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
    return lines


def results_record(records: list[dict[str, Any]], cfg: AskConfig, opened: OpenedWorkspace, args: argparse.Namespace,
                   started: float) -> dict[str, Any]:
    """results.json: the batch's means, the wall time, the workspace and the settings (credentials masked)."""
    return {**summarise(records), "wall_s": time.perf_counter() - started, "workspace": str(opened.snapshot_path),
            "config": redact({"reader": cfg.reader, "backend": cfg.backend or DEFAULT_BACKEND[cfg.reader][0],
                              "backend_args": cfg.backend_args, "budget": cfg.budget,
                              "questions": args.questions or "(argument)", "split": args.split,
                              "limit": args.limit})}


def write_outputs(out: Path, records: list[dict[str, Any]], lines: str, results: dict[str, Any]) -> None:
    """`out/answers.jsonl` (one record a line) and `out/results.json`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "answers.jsonl").write_text(lines, encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
