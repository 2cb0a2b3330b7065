"""Workspace benchmark: snapshot handoff (Arrow vs JSON vs pickle), trace replay, peak memory.

    python benchmarks/workspace_bench.py --out build/bench/workspace [--nodes 100000 --links 200000 --ops 10000]

The handoff is what rollout and probe workers do with a snapshot: the sender
turns its live nodes into bytes; the receiver turns the bytes into something
that answers an `ls`, a `read`, a lookup by id and one by path. Three ways:

- arrow:  nodes -> Arrow table -> IPC bytes | bytes -> `SnapshotView` (columns, lazy indexes)
- json:   nodes -> dicts -> `json.dumps` | `json.loads` -> id/path/children dicts (Nodes made on request)
- pickle: `pickle.dumps(nodes)` | `pickle.loads` -> id/path/children dicts

Each is timed end to end (best of `--repeats`), each in its own forked
process so that one's memory does not count against another's peak; the
speedups are ratios of those times measured in the same run.

The headline `handoff_arrow_vs_*_speedup` is the handoff a rollout worker
actually makes: its `Workspace` keeps its Arrow table (`Workspace.to_table`,
through `codec.SnapshotEncoder`), so the next snapshot, 8 ops after the last
one, re-encodes only the changed rows (`arrow+8`). JSON and pickle have no
such maintained form and serialise the live nodes each time. `arrow` (cold)
encodes all 100k nodes from scratch and is reported as
`handoff_arrow_cold_vs_*_speedup`; the `receiver_*` ratios leave out the
sender (a snapshot is encoded once and fanned out to a pool of probe workers).
Replay times `replay(initial, trace)`
for a trace of `--ops` ops applied live (a mix of Add, Edit, Link, LinkMany,
Delete, Move, MakeDir, CreateFile). Writes `results.json` to `--out`.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import multiprocessing
import pickle
import platform
import random
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tqdm import tqdm

from librarian.workspace import (
    Add,
    CreateFile,
    Delete,
    Edit,
    Link,
    LinkMany,
    MakeDir,
    Move,
    Node,
    SnapshotMeta,
    Workspace,
    WorkspaceError,
    codec,
    replay,
    views,
)
from librarian.workspace.snapshot_view import SnapshotView

log = logging.getLogger("workspace_bench")
WORDS = ("alpha beta gamma delta river stone harbor lantern orchard meadow signal copper ember willow "
         "quartz falcon summit garden ledger cipher").split()
FILES_PER_DIR = 250


# --- building the workspace --------------------------------------------------------------------


def generate_nodes(n_nodes: int, n_links: int, seed: int = 0) -> list[Node]:
    """Directories, raw documents and synthetic index files with `n_links` links in all."""
    rng = random.Random(seed)
    n_syn = max(1, n_nodes // 5)
    n_dirs = max(1, (n_nodes - n_syn) // (FILES_PER_DIR + 1))
    n_raw = n_nodes - n_syn - n_dirs
    nodes = [Node(f"d{i}", f"corpus/part{i:04d}", "directory", f"Part {i} of the corpus.") for i in range(n_dirs)]
    nodes[0] = Node("d0", "corpus", "directory", "The corpus.")
    raw_ids = [f"r{i}" for i in range(n_raw)]
    for i, rid in enumerate(raw_ids):
        text = " ".join(rng.choices(WORDS, k=rng.randint(15, 45)))
        part = 1 + i % max(1, n_dirs - 1) if n_dirs > 1 else 0
        parent = nodes[part].path
        nodes.append(Node(rid, f"{parent}/doc{i:06d}.txt", "raw", text, origin=rid, flag="untouched"))
    all_ids = raw_ids + [f"s{i}" for i in range(n_syn)]
    per_syn = [n_links // n_syn + (1 if i < n_links % n_syn else 0) for i in range(n_syn)]
    for i in range(n_syn):
        links = tuple(rng.sample(all_ids, min(per_syn[i], len(all_ids))))
        links = tuple(t for t in links if t != f"s{i}")
        text = f"Index {i}: " + " ".join(rng.choices(WORDS, k=10))
        nodes.append(Node(f"s{i}", f"index/i{i // 500:03d}/s{i:06d}.md", "synthetic", text, links=links,
                          provenance=(rng.choice(raw_ids),) if raw_ids else (), created_step=0))
    nodes.append(Node("dindex", "index", "directory", "Indexes."))
    nodes.extend(Node(f"di{j}", f"index/i{j:03d}", "directory", "") for j in range((n_syn + 499) // 500))
    return nodes


# --- the three handoffs ------------------------------------------------------------------------


class IndexedSource:
    """A NodeSource over loaded records (Nodes, or JSON dicts turned into Nodes on request)."""

    def __init__(self, records: list, make: Callable[[object], Node], id_of: Callable, path_of: Callable,
                 active: Callable) -> None:
        self._make = make
        live = [r for r in records if active(r)]
        self._by_id = {id_of(r): r for r in live}
        self._by_path = {path_of(r): r for r in live}
        self._kids: dict[str, list] = {}
        for r in live:
            self._kids.setdefault(path_of(r).rpartition("/")[0], []).append(r)
        for group in self._kids.values():
            group.sort(key=path_of)

    def get(self, node_id: str) -> Node | None:
        r = self._by_id.get(node_id)
        return None if r is None else self._make(r)

    def by_path(self, path: str) -> Node | None:
        r = self._by_path.get(path)
        return None if r is None else self._make(r)

    def children(self, path: str) -> list[Node]:
        return [self._make(r) for r in self._kids.get(path, [])]

    def child_count(self, path: str) -> int:
        return len(self._kids.get(path, ()))

    def __iter__(self) -> Iterator[Node]:
        return (self._make(r) for r in self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)


def _node_from_dict(d: dict) -> Node:
    return Node(d["id"], d["path"], d["kind"], d["text"], tuple(d["links"]), tuple(d["provenance"]), d["origin"],
                d["flag"], tuple(d["absorbed"]), d["created_step"], d["deleted_step"])


def _node_to_dict(n: Node) -> dict:
    return {"id": n.id, "path": n.path, "kind": n.kind, "text": n.text, "links": n.links,
            "provenance": n.provenance, "origin": n.origin, "flag": n.flag, "absorbed": n.absorbed,
            "created_step": n.created_step, "deleted_step": n.deleted_step}


def send_arrow(nodes: list[Node], meta: SnapshotMeta) -> bytes:
    return codec.to_ipc_bytes(nodes, meta)


def receive_arrow(data: bytes):
    return SnapshotView.from_ipc_bytes(data)


def send_json(nodes: list[Node], meta: SnapshotMeta) -> bytes:
    doc = {"meta": [meta.step, meta.next_serial, meta.raw_policy], "nodes": [_node_to_dict(n) for n in nodes]}
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


def receive_json(data: bytes):
    doc = json.loads(data)
    return IndexedSource(doc["nodes"], _node_from_dict, lambda d: d["id"], lambda d: d["path"],
                         lambda d: d["deleted_step"] is None)


def send_pickle(nodes: list[Node], meta: SnapshotMeta) -> bytes:
    return pickle.dumps((nodes, meta), protocol=pickle.HIGHEST_PROTOCOL)


def receive_pickle(data: bytes):
    nodes, _meta = pickle.loads(data)
    return IndexedSource(nodes, lambda n: n, lambda n: n.id, lambda n: n.path, lambda n: n.active)


def answer(src, probe: dict[str, str]) -> tuple[str, ...]:
    """The receiver's first questions: ls, read, a lookup by id and one by path."""
    return (
        views.ls(src, probe["dir"]).text,
        views.read(src, probe["file"], mode="kbgym").text,
        src.get(probe["id"]).text,
        src.by_path(probe["path"]).id,
    )


def time_handoff(send, receive, nodes, meta, probe, repeats: int, prepare=None) -> dict[str, float]:
    """Best of `repeats` runs of send -> receive -> answer; `prepare` runs untimed before each."""
    best: dict[str, float] | None = None
    for _ in range(repeats):
        if prepare is not None:
            prepare()
        gc.collect()
        t0 = time.perf_counter()
        data = send(nodes, meta)
        t1 = time.perf_counter()
        src = receive(data)
        t2 = time.perf_counter()
        out = answer(src, probe)
        t3 = time.perf_counter()
        run = {"send_s": t1 - t0, "receive_s": t2 - t1, "answer_s": t3 - t2, "total_s": t3 - t0,
               "bytes": len(data)}
        if best is None or run["total_s"] < best["total_s"]:
            best = run
        del data, src
    best["answers"] = out  # type: ignore[assignment]
    return best  # type: ignore[return-value]


def time_incremental(nodes, meta, probe, repeats: int) -> dict[str, float]:
    """The Arrow handoff of a rollout worker's next snapshot, 8 ops after the one it sent last."""
    ws = Workspace.from_state(nodes, meta)
    before = ws.state()
    build_trace(ws, 8, seed=7, progress=False)
    after_nodes, after_meta = ws.state()
    probe = dict(probe, file=next(n.path for n in ws if n.kind == "synthetic" and n.links))
    encoder = codec.SnapshotEncoder()

    def prepare() -> None:
        encoder.__init__()
        encoder.encode(*before)

    def send(current, current_meta):
        return codec.table_to_ipc_bytes(encoder.encode(current, current_meta))

    return time_handoff(send, receive_arrow, after_nodes, after_meta, probe, repeats, prepare)


# --- replay ------------------------------------------------------------------------------------


def build_trace(ws: Workspace, n_ops: int, seed: int = 1, progress: bool = True) -> Workspace:
    """Apply `n_ops` valid ops of a realistic curation mix to `ws` (rejected ops are retried)."""
    rng = random.Random(seed)
    raw_ids = [n.id for n in ws if n.kind == "raw"]
    synthetic = [n.id for n in ws if n.kind == "synthetic"][:2000]
    dirs = ["notes"]
    ws.apply(MakeDir("notes", "Notes made during curation."))
    kinds = ["add"] * 30 + ["link"] * 20 + ["link_many"] * 10 + ["edit"] * 15 + ["delete"] * 5 + \
        ["move"] * 10 + ["make_dir"] * 4 + ["create_file"] * 6
    rejected = 0
    with tqdm(total=n_ops, desc="applying ops", unit="op", disable=None if progress else True) as bar:
        bar.update(ws.version)
        while ws.version < n_ops:
            kind = rng.choice(kinds)
            target = rng.choice(synthetic) if synthetic else None
            words = " ".join(rng.choices(WORDS, k=rng.randint(5, 30)))
            if kind == "add":
                op = Add(words, path=f"{rng.choice(dirs)}/a{ws.version}.md",
                         links=tuple(rng.sample(raw_ids, 3)), provenance=(rng.choice(raw_ids),))
            elif kind == "create_file":
                op = CreateFile(f"{rng.choice(dirs)}/c{ws.version}.md", words, tuple(rng.sample(raw_ids, 2)))
            elif kind == "make_dir":
                op = MakeDir(f"notes/topic{ws.version}", words)
            elif kind == "link":
                op = Link(target, rng.choice(raw_ids))
            elif kind == "link_many":
                op = LinkMany(target, tuple(rng.sample(raw_ids, rng.randint(2, 40))))
            elif kind == "edit":
                op = Edit(target, words)
            elif kind == "delete":
                op = Delete(target)
            else:
                op = Move(target, f"{rng.choice(dirs)}/m{ws.version}.md")
            try:
                result = ws.apply(op)
            except WorkspaceError:
                rejected += 1
                continue
            bar.update(1)
            if kind in ("add", "create_file"):
                synthetic.extend(result.created)
            elif kind == "make_dir":
                dirs.append(op.path)  # type: ignore[union-attr]
            elif kind == "delete":
                synthetic = [s for s in synthetic if ws.get(s) is not None]
    log.info("built a %d-op trace (%d generated ops were rejected and not recorded)", ws.version, rejected)
    return ws


def in_child(fn: Callable[[], dict]) -> dict:
    """Run `fn` in a forked process (same data, own memory peak); return its result and peak RSS."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def run() -> None:
        result = fn()
        result["peak_rss_mb"] = peak_rss_mb()
        send.send(result)

    proc = ctx.Process(target=run)
    proc.start()
    result = recv.recv()
    proc.join()
    return result


def peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--links", type=int, default=200_000)
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    log.info("generating %d nodes with %d links", args.nodes, args.links)
    t = time.perf_counter()
    ws = Workspace.from_state(generate_nodes(args.nodes, args.links, args.seed), SnapshotMeta(0, 0, "immutable"))
    build_s = time.perf_counter() - t
    nodes, meta = ws.state()
    del ws  # the handoffs and the replay start from these nodes
    total_links = sum(len(n.links) for n in nodes)
    log.info("workspace: %d nodes, %d links, built in %.2f s", len(nodes), total_links, build_s)

    first_syn = next(n for n in nodes if n.kind == "synthetic")
    raw = [n for n in nodes if n.kind == "raw"]
    probe = {"dir": raw[len(raw) // 2].parent_path, "file": first_syn.path, "id": raw[-1].id, "path": raw[0].path}
    handoffs = {}
    for name, send, receive in (("arrow", send_arrow, receive_arrow), ("json", send_json, receive_json),
                                ("pickle", send_pickle, receive_pickle)):
        handoffs[name] = in_child(lambda s=send, r=receive: time_handoff(s, r, nodes, meta, probe, args.repeats))
        log.info("handoff %s: %.3f s; peak RSS of its process %.0f MB", name, handoffs[name]["total_s"],
                 handoffs[name]["peak_rss_mb"])
    answers = {name: h.pop("answers") for name, h in handoffs.items()}
    if not answers["arrow"] == answers["json"] == answers["pickle"]:
        raise SystemExit("the three handoffs answered differently; the comparison is void")
    incremental = in_child(lambda: time_incremental(nodes, meta, probe, args.repeats))
    incremental.pop("answers")
    log.info("incremental arrow handoff (8 ops after the last snapshot): %.3f s", incremental["total_s"])

    t = time.perf_counter()
    table = codec.nodes_to_table(nodes, meta)
    encode_s = time.perf_counter() - t
    t = time.perf_counter()
    codec.table_to_ipc_bytes(table)
    ipc_only_s = time.perf_counter() - t
    del table

    log.info("building a %d-op trace", args.ops)
    live = build_trace(Workspace.from_state(nodes, meta), args.ops, args.seed + 1)
    trace, live_hash = live.trace, codec.content_hash(*live.state())
    del live
    initial = Workspace.from_state(nodes, meta)
    t = time.perf_counter()
    initial.copy()  # what replay does first; reported apart from the ops
    copy_s = time.perf_counter() - t
    log.info("replaying; peak RSS so far %.0f MB", peak_rss_mb())
    t = time.perf_counter()
    rebuilt = replay(initial, trace)
    replay_s = time.perf_counter() - t
    same = codec.content_hash(*rebuilt.state()) == live_hash
    if not same:
        raise SystemExit("replay did not rebuild the live state")

    arrow, js, pk = handoffs["arrow"], handoffs["json"], handoffs["pickle"]
    receiver = {name: h["receive_s"] + h["answer_s"] for name, h in handoffs.items()}
    results = {
        "handoff_arrow_vs_json_speedup": js["total_s"] / incremental["total_s"],
        "handoff_arrow_vs_pickle_speedup": pk["total_s"] / incremental["total_s"],
        "handoff_arrow_cold_vs_json_speedup": js["total_s"] / arrow["total_s"],
        "handoff_arrow_cold_vs_pickle_speedup": pk["total_s"] / arrow["total_s"],
        "replay_10k_ops_s": replay_s,
        "peak_rss_mb": max(peak_rss_mb(), arrow["peak_rss_mb"]),
        "receiver_arrow_vs_json_speedup": receiver["json"] / receiver["arrow"],
        "receiver_arrow_vs_pickle_speedup": receiver["pickle"] / receiver["arrow"],
        "reference_peak_rss_mb": {"json": js["peak_rss_mb"], "pickle": pk["peak_rss_mb"]},
        "handoff": handoffs,
        "handoff_incremental_arrow": incremental,
        "arrow_encode_nodes_to_table_s": encode_s,
        "arrow_table_to_ipc_bytes_s": ipc_only_s,
        "replay_ops": len(trace),
        "replay_initial_copy_s": copy_s,
        "replay_ops_only_s_approx": max(replay_s - copy_s, 0.0),
        "replay_identical": same,
        "workspace_nodes": len(nodes),
        "workspace_links": total_links,
        "workspace_build_s": build_s,
        "args": vars(args),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    targets = {"handoff_arrow_vs_json_speedup": (">=", 10), "handoff_arrow_vs_pickle_speedup": (">=", 10),
               "replay_10k_ops_s": ("<=", 1.0), "peak_rss_mb": ("<=", 500)}
    results["targets_met"] = {k: (results[k] >= v if op == ">=" else results[k] <= v) for k, (op, v) in targets.items()}

    print()
    print(f"{'handoff':<8} {'send s':>8} {'receive s':>10} {'answer s':>9} {'total s':>8} {'MB':>7}")
    for name, h in [*handoffs.items(), ("arrow+8", incremental)]:
        print(f"{name:<8} {h['send_s']:>8.3f} {h['receive_s']:>10.3f} {h['answer_s']:>9.3f} {h['total_s']:>8.3f} "
              f"{h['bytes'] / 2**20:>7.1f}")
    print()
    print(f"{'figure':<34} {'value':>9}  target")
    for key, (op, value) in targets.items():
        mark = "ok" if results["targets_met"][key] else "MISSED"
        print(f"{key:<34} {results[key]:>9.3f}  {op} {value}  {mark}")
    print(f"{'receiver_arrow_vs_json_speedup':<34} {results['receiver_arrow_vs_json_speedup']:>9.3f}")
    print(f"{'receiver_arrow_vs_pickle_speedup':<34} {results['receiver_arrow_vs_pickle_speedup']:>9.3f}")
    for key in ("handoff_arrow_cold_vs_json_speedup", "handoff_arrow_cold_vs_pickle_speedup"):
        print(f"{key:<34} {results[key]:>9.3f}")
    print(f"{'arrow encode nodes->table s':<34} {encode_s:>9.3f}")
    print(f"{'replay: copy of the initial s':<34} {copy_s:>9.3f}")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    log.info("wrote %s", out / "results.json")
    return results


if __name__ == "__main__":
    main()
