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
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from librarian.app.build import _kv
from librarian.app.corpus import AskItem, InputError, load_questions
from librarian.app.provenance import provenance_paths
from librarian.app.workspace_dir import OpenedWorkspace, open_workspace, read_manifest
from librarian.datasets.scoring import score
from librarian.models import make_backend
from librarian.models.base import BackendError, SamplingParams
from librarian.models.scripted import ScriptedBackend, make_scripted_backend
from librarian.redact import redact
from librarian.roles import LoopConfig, ToolContext, ToolEnv, kbgym_reader, librarian_answerer, run_episodes
from librarian.roles.definitions import jam_researcher
from librarian.roles.kbgym_passes import forward_task
from librarian.roles.researcher import ResearchEnv
from librarian.roles.researcher_tools import JAM_RESEARCHER, finalized
from librarian.workspace.errors import SnapshotFormatError, WorkspaceError
from librarian.workspace.text import terminal_safe

log = logging.getLogger("librarian.ask")
READERS = ("auto", "kbgym", "librarian", "jam")
FACT_BUILDERS = ("kbgym_keys",)  # a store built by these answers KBGym-style questions
READ_TOOLS = frozenset({"read", "open", "browse"})
DEFAULT_BACKEND = {"kbgym": ("scripted", {"policy": "kbgym_reader"}), "librarian": ("hf", {"model": "smollm2"}),
                   "jam": ("scripted", {"policy": "jam_researcher"})}


@dataclass
class AskConfig:
    """How questions are answered."""

    reader: str = "auto"  # auto: `default_reader` of the workspace
    backend: str | None = None  # default per reader (DEFAULT_BACKEND)
    backend_args: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None  # the role's budget when None
    batch: int = 32  # episodes generated together
    max_new_tokens: int = 256
    search_mode: str = "bm25"
    llm_researcher: bool = False  # jam + a model backend: the model runs the tools (else it writes the answer)


def default_reader(opened: OpenedWorkspace) -> str:
    """`kbgym` for a KBGym/PhantomWiki fact store (built by `kbgym_keys`, or from a `librarian data` folder),
    `jam` (the researcher, which reads any text) otherwise."""
    by_manifest = reader_of_manifest(opened.manifest)
    if by_manifest is not None:
        return by_manifest
    raw = [n.path for n in opened.source if n.kind == "raw"]  # a build without the record: facts live in facts/
    return "kbgym" if raw and all(p.startswith("facts/") for p in raw) else "jam"


def reader_of_manifest(manifest: dict[str, Any]) -> str | None:
    """The default reader a build's `workspace.json` decides, or None when it does not record enough."""
    if manifest.get("builder") in FACT_BUILDERS or manifest.get("corpus_kind") == "dataset":
        return "kbgym"
    return "jam" if "corpus_kind" in manifest else None


def resolve_reader(reader: str, opened: OpenedWorkspace) -> str:
    return default_reader(opened) if reader == "auto" else reader


def writes_answers(cfg: AskConfig, reader: str) -> bool:
    """Whether the researcher finds passages and a model backend writes the answer from them."""
    return reader == "jam" and cfg.backend not in (None, "scripted") and not cfg.llm_researcher


def make_role(reader: str, budget: int | None):
    """The reader role for `--reader`."""
    if reader == "kbgym":
        return kbgym_reader() if budget is None else kbgym_reader(budget=budget)
    if reader == "librarian":
        return librarian_answerer() if budget is None else librarian_answerer(budget=budget)
    if reader == "jam":
        return jam_researcher() if budget is None else jam_researcher(budget=budget)
    raise InputError(f"unknown reader {reader!r}; choose one of {', '.join(READERS)}")


def make_reader_backend(cfg: AskConfig, reader: str | None = None):
    """The backend `cfg` names (default: the reader's own)."""
    name, args = DEFAULT_BACKEND.get(reader or cfg.reader, ("scripted", {}))
    if cfg.backend is not None:
        name, args = cfg.backend, {}
    if name != "scripted":
        print(f"librarian ask: loading the {name} backend ...", file=sys.stderr, flush=True)
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


_SECTION = re.compile(r"^(?P<file>.+)#L(?P<first>\d+)-L\d+$")


def file_of(node: Any) -> str | None:
    """The corpus file a node comes from: a section of a split file names the whole file."""
    if node is None:
        return None
    m = _SECTION.match(node.origin or "") if node.kind == "raw" else None
    return m["file"] if m is not None else node.path


def passages_of(src: Any, context: str, cited: Sequence[str]) -> list[dict[str, Any]]:
    """The researcher's evidence lines (`path: line`) with their place: node path and line, and the file and
    line they come from (a section of a split file points into the whole file)."""
    paths = sorted({p for p in cited if src.by_path(p) is not None}, key=len, reverse=True)
    out: list[dict[str, Any]] = []
    for entry in context.splitlines():
        path = next((p for p in paths if entry.startswith(p + ": ")), None)
        if path is None:
            continue
        node, text = src.by_path(path), entry[len(path) + 2:]
        if node.kind == "synthetic" and node.text.strip() == text.strip():
            continue  # an index file's title ("Ada Lovelace"): its documents are the passages
        lines = node.text.splitlines()
        line = next((i for i, ln in enumerate(lines, start=1) if ln == text), None)
        where, at = file_of(node) or path, line
        m = _SECTION.match(node.origin or "") if node.kind == "raw" else None
        if m is not None and line is not None:
            at = int(m["first"]) + line - 1
        out.append({"path": path, "line": line, "text": text, "file": where, "file_line": at})
    return out


def tool_call_failure(traj: Any) -> str | None:
    """Why a model's run is not an answer: no valid tool call in any turn (only errors), else None."""
    turns = [t for t in traj.turns if not t.forced]
    errors = [e for t in turns for e in t.errors]
    if not turns or any(t.calls for t in turns) or not errors:
        return None
    kinds = sorted({e["message"].split(";")[0][:80] for e in errors})
    return (f"the model made no valid tool call in {len(turns)} turn(s): {len(errors)} tool-call error(s) "
            f"({'; '.join(kinds[:3])}); its answer is not grounded in the workspace")


def score_record(rec: dict[str, Any], item: AskItem) -> None:
    """The record's F1 against the item's gold answers (when it has any)."""
    if item.answers:
        rec["gold"] = list(item.answers)
        try:
            rec["f1"] = score(item.metric, rec["answer"] or "", list(item.answers))
        except ValueError as exc:
            rec["f1"] = None
            rec["score_error"] = str(exc)


def record(item: AskItem, traj: Any, src: Any, with_trace: bool) -> dict[str, Any]:
    """One question's JSON record: answer, score, files read, provenance, costs (and the trace)."""
    read = files_read(src, traj)
    rec: dict[str, Any] = {"id": item.id, "question": item.question, "answer": traj.answer, "end": traj.end,
                           "files_read": read, "nodes_seen": len(traj.nodes_touched), "actions": traj.actions,
                           "est_tokens_read": traj.est_tokens_read}
    if traj.role == JAM_RESEARCHER:  # the answer is the passages found; its sources are raw files
        result = finalized(traj.answer)
        rec["passages"] = passages_of(src, result.context, result.cited)
        rec["searched"] = any(c["name"] == "search" for t in traj.turns for c in t.calls)
        rec["found"] = bool(result.sources) and rec["searched"]  # never an answer without a search
        rec["answer"] = result.context if traj.answer is not None and rec["found"] else None
        rec["sources"] = [n.path if (n := src.get(i)) is not None else i for i in result.sources]
        rec["source_files"] = list(dict.fromkeys(file_of(src.get(i)) or i for i in result.sources))
        rec["cited"], rec["sufficient"] = list(result.cited), result.sufficient
    if (failure := tool_call_failure(traj)) is not None:
        rec["failure"], rec["model_answer"], rec["answer"] = failure, rec["answer"], None
    prov = {}
    for path in read:
        node = src.by_path(path)
        if node is not None and node.kind != "raw":
            prov[path] = provenance_paths(src, node.id, max_paths=3)
    rec["provenance"] = prov
    score_record(rec, item)
    if with_trace:
        rec["trace"] = [{"calls": t.calls, "errors": t.errors, "observation": t.observation} for t in traj.turns]
    return rec


class ModelProgress:
    """A backend that shows each model call on stderr (turns so far, questions still running, time)."""

    def __init__(self, backend: Any, label: str) -> None:
        self.backend = backend
        self.bar = tqdm(desc=label, unit="turn", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def generate(self, conversations: Any, tools: Any, params: Any) -> Any:
        self.bar.set_postfix_str(f"{len(conversations)} running")
        out = self.backend.generate(conversations, tools, params)
        self.bar.update(1)
        return out

    def close(self) -> None:
        self.bar.close()


WRITER_PROMPT = ("You answer questions about the user's own notes. Use only the passages below; each starts with "
                 "the file and line it comes from. Answer in one or two sentences and name the file(s) you used. "
                 "If the passages do not answer the question, say that the notes do not say.")


def write_answers(writer: Any, records: list[dict[str, Any]], cfg: AskConfig) -> None:
    """A model writes each found record's answer from its passages (records that found nothing keep none)."""
    todo = [r for r in records if r.get("found") and r.get("passages")]
    if not todo:
        return
    prompts = [[{"role": "system", "content": WRITER_PROMPT},
                {"role": "user", "content": "Passages:\n" + "\n".join(
                    f"[{p['file']}:{p['file_line'] or '?'}] {p['text']}" for p in r["passages"])
                 + f"\n\nQuestion: {r['question']}"}] for r in todo]
    progress = ModelProgress(writer, "writing answers")
    try:
        samples = progress.generate(prompts, None, SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0))
    finally:
        progress.close()
    for rec, (sample, *_) in zip(todo, samples, strict=True):
        rec["answer"], rec["answered_by"] = sample.text.strip(), getattr(writer, "name", type(writer).__name__)


def answer(opened: OpenedWorkspace, items: Sequence[AskItem], cfg: AskConfig, backend: Any = None,
           with_trace: bool = False, writer: Any = None) -> list[dict[str, Any]]:
    """Answer `items` over an opened workspace; returns one record per item.

    The reader is `cfg.reader` (`auto`: `default_reader`). With the `jam`
    reader and a model (`writer`, or a model `cfg.backend` without
    `cfg.llm_researcher`), the scripted researcher finds the passages and the
    model writes each answer from them.
    """
    reader = resolve_reader(cfg.reader, opened)
    role = make_role(reader, cfg.budget)
    if reader in ("kbgym", "jam") and opened.index is None:
        raise InputError(f"{opened.snapshot_path}: the {reader} reader searches, but no saved index was found "
                         "beside the snapshot; build the workspace with `librarian build` or use --reader librarian")
    if reader == "jam" and (writer is not None or writes_answers(cfg, reader)):
        writer = writer if writer is not None else backend if backend is not None else make_reader_backend(cfg, reader)
        backend = make_scripted_backend("jam_researcher")
    else:
        writer = None
        backend = backend if backend is not None else make_reader_backend(cfg, reader)
    model = None if isinstance(backend, ScriptedBackend) else ModelProgress(backend, f"{reader} reader (model turns)")
    mode = cfg.search_mode
    if reader == "jam" and getattr(opened.index, "embedder", None) is not None:
        mode = "hybrid"  # the researcher's search is BM25 + dense when the index has vectors
    ctx = ToolContext(opened.source, index=opened.index, search_mode=mode)
    env_type = ResearchEnv if reader == "jam" else ToolEnv
    loop = LoopConfig(SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0))
    out: list[dict[str, Any]] = []
    try:
        with tqdm(total=len(items), desc=f"asking ({reader})", unit="question", disable=len(items) < 2) as bar:
            for start in range(0, len(items), cfg.batch):
                chunk = items[start:start + cfg.batch]
                envs = [env_type(role, ctx, item.question if reader == "jam" else forward_task(item.question))
                        for item in chunk]
                for item, traj in zip(chunk, run_episodes(envs, model or backend, role, loop), strict=True):
                    out.append({**record(item, traj, opened.source, with_trace), "reader": reader})
                bar.update(len(chunk))
    finally:
        if model is not None:
            model.close()
    if writer is not None:
        write_answers(writer, out, cfg)
        for rec, item in zip(out, items, strict=True):
            score_record(rec, item)
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


MAX_SHOWN_PASSAGES = 20


def answer_text(rec: dict[str, Any]) -> str:
    """The `A:` line: the answer, what the researcher found, or plainly why there is none."""
    if rec.get("failure"):
        return f"(no answer: {rec['failure']})"
    if "passages" not in rec:
        return rec["answer"] if rec["answer"] is not None else f"(no answer: {rec['end']})"
    if not rec.get("searched"):
        return "(no answer: the reader finished without searching the workspace)"
    if not rec.get("found"):
        return (f"nothing found: no passage in the workspace answers this ({rec['actions']} actions, "
                f"{len(rec['files_read'])} files read)")
    if rec.get("answered_by") or not rec["passages"]:
        return rec["answer"]
    files = len({p["file"] for p in rec["passages"]})
    return (f"{len(rec['passages'])} passage(s) from {files} file(s) (--backend openai or hf writes an answer "
            "from them):")


def print_record(rec: dict[str, Any], with_trace: bool, stream: Any = None) -> None:
    """The human-readable answer block (control characters in stored text are shown escaped, never run)."""
    out = stream or sys.stdout

    def w(text: str) -> None:
        out.write(terminal_safe(text))
    w(f"Q: {rec['question']}\nA: {answer_text(rec)}")
    if "f1" in rec and rec["f1"] is not None:
        w(f"   (gold: {', '.join(rec['gold'])}; F1 {rec['f1']:.2f})")
    shown = rec.get("passages", [])[:MAX_SHOWN_PASSAGES] if rec.get("found") else []
    for p in shown:
        w(f"\n  {p['file']}:{p['file_line'] or '?'}: {p['text'].strip()}")
    if len(rec.get("passages", [])) > len(shown) and shown:
        w(f"\n  ... and {len(rec['passages']) - len(shown)} more (all in --jsonl)")
    w(f"\nfiles read ({len(rec['files_read'])}, {rec['actions']} actions):\n")
    for path in rec["files_read"]:
        w(f"  {path}\n")
        for chain in rec["provenance"].get(path, []):
            w(f"    provenance: {' -> '.join(chain)}\n")
    if "sources" in rec:
        w(f"sources ({'sufficient' if rec['sufficient'] else 'not judged sufficient'}): "
          f"{', '.join(rec.get('source_files') or rec['sources']) or 'none'}\n")
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
    """CLI entry."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    args = parser().parse_args(list(argv))
    started = time.perf_counter()
    try:
        if args.question is not None:
            if not args.question.strip():
                raise InputError("the question is empty; ask something, or use --questions FILE")
            items = [AskItem("q1", args.question.strip())]
        elif args.questions:
            items = load_questions(args.questions, args.split)
        else:
            raise InputError("give a question, or --questions FILE (or - for stdin)")
        if args.limit is not None:
            items = items[: args.limit]
        cfg = AskConfig(reader=args.reader, backend=args.backend, backend_args=_kv(args.backend_arg),
                        budget=args.budget, llm_researcher=args.llm_researcher, max_new_tokens=args.max_new_tokens)
        if cfg.reader == "auto" and Path(args.workspace).is_dir():  # decided before any model is loaded
            cfg.reader = reader_of_manifest(read_manifest(Path(args.workspace))) or "auto"
        if cfg.reader != "auto":
            make_role(cfg.reader, cfg.budget)
        # the researcher searches with the build's embedder (hybrid); the KBGym reader needs BM25 only
        embedder = args.embedder if args.embedder is not None else (None if cfg.reader in ("auto", "jam") else "none")
        opened = open_workspace(args.workspace, embedder=embedder)
        cfg.reader = resolve_reader(cfg.reader, opened)
        records = answer(opened, items, cfg, with_trace=args.trace or bool(args.jsonl) or bool(args.out))
    except (InputError, WorkspaceError, SnapshotFormatError) as exc:
        print(f"librarian ask: {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"librarian ask: the model backend failed: {exc}", file=sys.stderr)
        return 1
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
                   "config": redact({"reader": cfg.reader, "backend": cfg.backend or DEFAULT_BACKEND[cfg.reader][0],
                                     "backend_args": cfg.backend_args, "budget": cfg.budget,
                                     "questions": args.questions or "(argument)", "split": args.split,
                                     "limit": args.limit})}
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    failed = [r for r in records if r.get("failure")]
    if failed:
        print(f"librarian ask: {len(failed)} of {len(records)} question(s) got no answer: {failed[0]['failure']} "
              "(--trace shows the model's turns)", file=sys.stderr)
        return 1
    return 0
