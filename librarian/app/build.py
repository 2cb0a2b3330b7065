"""`librarian build CORPUS --out DIR`: run a builder over a corpus and write the workspace.

CORPUS is a folder of .txt/.md files, a .jsonl of documents, or a folder
written by `librarian data`. DIR receives the initial store, the built
snapshot, its trace, the search index, an exported folder tree,
`workspace.json` and `results.json` (construction cost: ops, model calls,
tokens generated, wall time).

Resumable: the trace is checkpointed every `--checkpoint-every` ops; running
the same command again replays it and continues where it stopped
(`--restart` starts over). Extractive builders split the corpus into shards
across Ray workers with `--workers N` (N > 1).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from librarian.app import builders
from librarian.app.corpus import InputError, LoadedCorpus, corpus_kind, load_corpus
from librarian.app.policy_build import run_policy_build
from librarian.app.workspace_dir import EXPORT, INDEX, INITIAL, MANIFEST, SNAPSHOT, TRACE
from librarian.cluster.ray_init import cluster_address, connect
from librarian.redact import redact
from librarian.search.embedders import MiniLMEmbedder
from librarian.search.factory import SearchConfig, make_index
from librarian.search.sync import IndexSync
from librarian.workspace import Document, Workspace, WorkspaceError, codec, read_trace, replay, write_trace
from librarian.workspace.errors import SnapshotFormatError
from librarian.workspace.folder_io import export_folder
from librarian.workspace.stats import structure_stats

log = logging.getLogger("librarian.build")
STATE = "build_state.json"
# MiniLM batch for the build's index: long sections fill all 256 positions, and a batch of 64 of them takes
# about 560 MB of activations on CPU, 16 about 150 MB, 8 about 100 MB, at much the same speed
EMBED_BATCH = 8


class BuildEmbedder(MiniLMEmbedder):
    """MiniLM for a build: a small batch, and a model that is let go once everything is embedded."""

    def __init__(self) -> None:
        super().__init__(batch_size=EMBED_BATCH)

    def release(self) -> None:
        """Drop the model (it loads again if anything is embedded later)."""
        self._model = None


def release_memory() -> None:
    """Hand freed memory back to the system: what Arrow's allocator keeps after a Parquet write (about 3x the
    text) and, on glibc, the heap a model's activations left (`malloc_trim`)."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


@dataclass
class BuildConfig:
    """What `librarian build` runs."""

    corpus: str
    out_dir: str
    builder: str = "entities"
    workers: int = 1
    checkpoint_every: int = 200
    restart: bool = False
    raw_policy: str = "immutable"
    embedder: str = "minilm"  # the search index: minilm (hybrid), hashing, none (BM25 only)
    export: bool = True
    backend: str = "scripted"  # policy builder only
    backend_args: dict[str, Any] = field(default_factory=dict)
    budget: int = 40
    ray_temp_dir: str | None = None  # Ray's session folder (default: DIR/ray, or a short temp folder)
    ray_address: str = ""  # the Ray cluster to join ('': $RAY_ADDRESS if set, else a local Ray; local: always one)
    stop_after: int | None = None  # stop after this many new ops (tests of resuming; a crash stand-in)
    follow_symlinks: bool = False  # follow symlinks that stay inside a corpus folder (never ones that leave it)
    section_chars: int = 8_000  # a corpus file longer than this is split into sections of at most this size


class BuildInterrupted(RuntimeError):
    """Raised by `stop_after`: the build stopped with its trace checkpointed."""


def extract(cfg: BuildConfig, docs: Sequence[Document]) -> tuple[builders.KeyTable, int]:
    """The merged key table, computed locally or over Ray workers; returns it and the shard count."""
    pairs = [(d.id, d.text) for d in docs]
    if cfg.workers <= 1:
        return builders.extract_shard(cfg.builder, pairs), 1
    shards = builders.shards_of(pairs, cfg.workers * 2)
    import ray

    started_here = not ray.is_initialized()
    scratch = None
    if started_here and cluster_address(cfg.ray_address):  # a cluster is named: join it, pass no resources
        connect(cfg.ray_address)
    elif started_here:
        tmp = Path(cfg.ray_temp_dir) if cfg.ray_temp_dir else Path(cfg.out_dir).resolve() / "ray"
        if len(str(tmp)) > 40:  # Ray's socket paths must stay under 107 bytes

            tmp = scratch = Path(tempfile.mkdtemp(prefix="ray-"))
        tmp.mkdir(parents=True, exist_ok=True)
        connect("local", num_cpus=cfg.workers, temp_dir=str(tmp))
    try:
        task = ray.remote(builders.extract_shard)
        refs = [task.remote(cfg.builder, shard) for shard in shards]
        tables = []
        for ref in tqdm(refs, desc="extracting (ray)", unit="shard"):
            tables.append(ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return builders.merge_tables(tables), len(shards)


def _resume(out: Path, initial: Workspace, cfg: BuildConfig) -> tuple[Workspace, dict]:
    """Replay a checkpointed trace over the initial store (or start fresh)."""
    trace_file, state_file = out / TRACE, out / STATE
    if cfg.restart or not trace_file.is_file():
        return initial.copy(), {}
    saved = codec.read_parquet(out / INITIAL) if (out / INITIAL).is_file() else None
    if saved is None or codec.content_hash(*saved) != initial.content_hash():
        raise WorkspaceError(f"{out} holds a build of a different corpus; pass --restart or use another --out")
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    if state.get("builder", cfg.builder) != cfg.builder:
        raise WorkspaceError(f"{out} holds a build by {state['builder']!r}, not {cfg.builder!r}; pass --restart")
    ws = replay(initial, read_trace(trace_file))
    log.info("resumed: replayed %d ops from %s", ws.version, trace_file)
    return ws, state


def _checkpoint(ws: Workspace, out: Path, state: dict) -> None:
    write_trace(ws.trace, out / TRACE)
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(out / STATE)


def apply_planned(ws: Workspace, ops: list, cfg: BuildConfig, out: Path, state: dict) -> int:
    """Apply the planned ops not yet in the trace; checkpoint as it goes. Returns how many it applied."""
    done = ws.version
    if done > len(ops) or any(ws.trace[i].op != ops[i].to_dict() for i in range(done)):
        raise WorkspaceError(f"the trace in {out} does not match what {cfg.builder!r} plans for this corpus; "
                             "pass --restart")
    applied = 0
    for op in tqdm(ops[done:], desc=f"building ({cfg.builder})", unit="op", initial=0, total=len(ops) - done):
        ws.apply(op)
        applied += 1
        if ws.version % cfg.checkpoint_every == 0:
            _checkpoint(ws, out, state)
        if cfg.stop_after is not None and applied >= cfg.stop_after:
            _checkpoint(ws, out, state)
            raise BuildInterrupted(f"stopped after {applied} ops (trace checkpointed at {ws.version})")
    return applied


def run(cfg: BuildConfig) -> dict:
    """Build; returns the figures written to `results.json`."""
    if cfg.builder not in builders.BUILDERS:
        raise InputError(f"unknown builder {cfg.builder!r}; choose one of {', '.join(builders.BUILDERS)}")
    if cfg.workers < 1 or cfg.checkpoint_every < 1 or cfg.section_chars < 1:
        raise InputError("--workers, --checkpoint-every and --section-chars must be at least 1")
    started = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    log.info("reading the corpus %s (%s)", cfg.corpus, corpus_kind(cfg.corpus))
    corpus = load_corpus(cfg.corpus, follow_symlinks=cfg.follow_symlinks, section_chars=cfg.section_chars)
    docs = corpus.documents
    initial = Workspace.from_documents(docs, raw_policy=cfg.raw_policy)  # type: ignore[arg-type]
    ws, state = _resume(out, initial, cfg)
    resumed_from = ws.version
    codec.write_parquet(*initial.state(), out / INITIAL)
    release_memory()
    state = {**state, "builder": cfg.builder}

    shards, model_calls, tokens, keys = 0, 0, 0, 0
    if cfg.builder == "policy":
        cost = run_policy_build(ws, cfg.backend, dict(cfg.backend_args), cfg.budget, int(state.get("actions", 0)))
        model_calls, tokens = cost.model_calls, cost.tokens_generated
        state["actions"] = cost.actions
        applied = ws.version - resumed_from
        _checkpoint(ws, out, state)
    else:
        t = time.perf_counter()
        table, shards = extract(cfg, docs)
        log.info("extracted %d keys from %d documents in %d shard(s) in %.1f s", len(table), len(docs), shards,
                 time.perf_counter() - t)
        ops = builders.plan_ops(table, builders.default_options(cfg.builder))
        keys = sum(1 for op in ops if op.name == "add")
        applied = apply_planned(ws, ops, cfg, out, state)
        _checkpoint(ws, out, state)

    log.info("writing the snapshot, index and export to %s", out)
    codec.write_parquet(*ws.state(), out / SNAPSHOT)
    snapshot_hash = ws.content_hash()  # once, and before a model is loaded: it copies the whole store
    release_memory()
    search = SearchConfig(embedder=cfg.embedder)
    embedder = BuildEmbedder() if cfg.embedder == "minilm" else None
    index = make_index(search, embedder)
    log.info("indexing %d nodes for search (BM25%s)", len(ws), "" if cfg.embedder == "none" else f" + {cfg.embedder}")
    IndexSync(index, ws).end_iteration()
    if embedder is not None:
        embedder.release()  # everything is embedded: the model's memory is not needed for the rest
    release_memory()
    IndexSync(index, ws, ws.version).save(out / INDEX)
    del index
    release_memory()
    if cfg.export:
        export_folder(ws, out / EXPORT, overwrite=True, progress=True)
    stats = structure_stats(ws)
    manifest = {"snapshot": SNAPSHOT, "initial": INITIAL, "trace": TRACE, "index": INDEX,
                "export": EXPORT if cfg.export else None, "builder": cfg.builder,
                "search": {"backend": "embedded", "embedder": cfg.embedder, "hashing_dim": search.hashing_dim},
                "corpus_kind": corpus.kind,
                "snapshot_hash": snapshot_hash}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    results = {
        "corpus": cfg.corpus, "docs": len(docs), "builder": cfg.builder,
        "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail} for s in corpus.skipped],
        "skipped_counts": corpus.skipped_counts(), "split_files": corpus.sections,
        "ops_applied": ws.version, "ops_this_run": applied, "resumed_from_op": resumed_from,
        "index_documents": keys or stats.synthetic,
        "cost": {"model_calls": model_calls, "tokens_generated": tokens, "wall_s": time.perf_counter() - started,
                 "shards": shards, "workers": cfg.workers},
        "structure": stats.as_dict(), "snapshot_hash": snapshot_hash,
        "files": {k: str(out / v) for k, v in manifest.items() if k in ("snapshot", "trace", "index", "export") and v},
        "config": redact(asdict(cfg)),  # no credential from --backend-arg is written
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"built {cfg.builder}: {len(docs)} documents -> {stats.synthetic} synthetic files, {ws.version} ops "
          f"({applied} this run), coverage {stats.coverage_one_hop:.1%} one hop; "
          f"{model_calls} model calls, {tokens} tokens, {results['cost']['wall_s']:.1f} s")
    print(f"wrote {out / SNAPSHOT}, {out / TRACE}, {out / INDEX}/"
          + (f", {out / EXPORT}/" if cfg.export else "") + f" and {out / 'results.json'}")
    print_inputs(corpus)
    return results


def print_inputs(corpus: LoadedCorpus, shown: int = 50) -> None:
    """The build summary's account of the corpus: files split into sections, and every file left out."""
    if corpus.sections:
        parts = sum(corpus.sections.values())
        print(f"split {len(corpus.sections)} long file(s) into {parts} sections: "
              + ", ".join(f"{f} ({n})" for f, n in list(corpus.sections.items())[:10])
              + (" ..." if len(corpus.sections) > 10 else ""))
    if not corpus.skipped:
        return
    counts = ", ".join(f"{n} {reason}" for reason, n in sorted(corpus.skipped_counts().items()))
    print(f"skipped {len(corpus.skipped)} file(s) ({counts}); all are listed in results.json:")
    for entry in corpus.skipped[:shown]:
        print(f"  {entry}")
    if len(corpus.skipped) > shown:
        print(f"  ... and {len(corpus.skipped) - shown} more")


def backend_args(items: list[str]) -> dict[str, Any]:
    """`--backend-arg key=value` flags as keyword arguments (a value that parses as JSON is that JSON)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--backend-arg takes key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="librarian build", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", help="folder of .txt/.md, a .jsonl of documents, or a `librarian data` folder")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--builder", default="entities", choices=builders.BUILDERS)
    p.add_argument("--workers", type=int, default=1, help="Ray workers for extractive builders (1 = in process)")
    p.add_argument("--ray-address", default="", metavar="ADDRESS",
                   help="with --workers N: the Ray cluster to join (auto, host:port, ray://host:10001); default: "
                        "$RAY_ADDRESS when set (as inside `ray job submit`), else a local Ray; local: always local")
    p.add_argument("--checkpoint-every", type=int, default=200, help="write the trace every N ops")
    p.add_argument("--restart", action="store_true", help="ignore a checkpointed trace in --out")
    p.add_argument("--raw-policy", default="immutable", choices=("immutable", "editable"))
    p.add_argument("--embedder", default="minilm", choices=("minilm", "hashing", "none"),
                   help="search index vectors (none: BM25 only)")
    p.add_argument("--no-export", action="store_true", help="skip the exported folder tree")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="follow symlinks that resolve inside the corpus folder (links out of it are always skipped)")
    p.add_argument("--section-chars", type=int, default=8_000,
                   help="split corpus files longer than this many characters into sections (headings, paragraphs)")
    p.add_argument("--backend", default="scripted", help="policy builder: hf, openai, scripted, vllm")
    p.add_argument("--backend-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="policy builder: backend option, e.g. policy=librarian_builder, model=smollm2, base_url=...")
    p.add_argument("--budget", type=int, default=40, help="policy builder: action budget")
    return p


def main(argv: Sequence[str]) -> int:
    """CLI entry."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = parser().parse_args(list(argv))
    try:
        cfg = BuildConfig(corpus=args.corpus, out_dir=args.out, builder=args.builder, workers=args.workers,
                          checkpoint_every=args.checkpoint_every, restart=args.restart, raw_policy=args.raw_policy,
                          embedder=args.embedder, export=not args.no_export, backend=args.backend,
                          backend_args=backend_args(args.backend_arg), budget=args.budget, ray_address=args.ray_address,
                          follow_symlinks=args.follow_symlinks, section_chars=args.section_chars)
        run(cfg)
    except (InputError, WorkspaceError, SnapshotFormatError) as exc:
        print(f"librarian build: {exc}", file=sys.stderr)
        return 2
    return 0


