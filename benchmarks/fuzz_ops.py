"""Fuzz benchmark: random valid and invalid op payloads against a live workspace, every check after every op.

    python benchmarks/fuzz_ops.py --ops 100000 --out build/bench/fuzz [--seed 0] [--episode 400]

Payloads are what an agent or an HTTP client could send: all 11 op kinds
with ids and paths that exist, were deleted or never existed; unicode names,
lone surrogates, control characters and ANSI escapes, empty and oversized
strings, too many links; and malformed payloads (wrong types, unknown or
missing arguments, an `op` that is not a string, not a dict at all). Each goes
through `Workspace.apply_payload`, which must either apply it or raise
`WorkspaceError`; after every op:

- a rejected op left the store exactly as it was;
- `invariant_violations` is empty, no applied op stored text the op boundary
  refuses (`workspace.text`), no `add` carries more than 40 links;
- replay: the trace entry, through JSON, applied to a replica with its
  recorded verdicts, gives the same state;
- Arrow round trip: the snapshot through IPC bytes decodes to the same nodes
  and meta, and the content hash is computable.

Every `--episode` ops the store starts afresh (random corpus, raw policy,
near-duplicate guard on or off) after a full `replay` of the episode's trace,
also written to and read back from Parquet. `results.json`: `ops`, `accepted`,
`rejected`, `invariant_breaks`, `replay_mismatches`, `roundtrip_failures`,
`unexpected_exceptions` (target 0 of each break kind), per-kind counts, the
first examples of each break, and the rate.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

from librarian.workspace import (
    Document,
    NearDuplicateGuard,
    Workspace,
    WorkspaceError,
    codec,
    read_trace,
    replay,
    write_trace,
)
from librarian.workspace.invariants import invariant_violations
from librarian.workspace.ops import MAX_LINK_MANY_TARGETS, MAX_TEXT_CHARS, OP_TYPES
from librarian.workspace.text import check_name, check_text

log = logging.getLogger("fuzz_ops")
KINDS = tuple(OP_TYPES)  # the 11 op kinds
NAMES = ("a", "b", "notes", "idx", "x.md", "ü", "日本", "emoji 😀", "d e", "raw", "sessions", "Ωmega", "n0", "s1")
WORDS = "alpha beta gamma river stone harbor lantern Ada Moss Port Avel café naïve 東京 😀 Ω".split()
BAD_TEXTS = ("smile \ud83d", "\udc00", "line\x07bell\x1b[31mred", "nul\x00", "c1 \x9b31m", "rewrite\rline",
             "\x1b]0;title\x07", "del\x7f")
BAD_NAMES = ("", " ", ".", "..", "../x", "/abs", "~/x", "a\\b", "a/../b", "a\x00b", "x\ud83d", "\x1b[2J", "a\nb",
             "n" * 300, "x/" * 600)
BREAKS = ("invariant_breaks", "replay_mismatches", "roundtrip_failures", "unexpected_exceptions")
MAX_EXAMPLES = 5


class PayloadGen:
    """Random op payloads for the current state of a workspace (valid about two times in three)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.doc_serial = 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def text(self) -> str:
        r = self.rng.random()
        if r < 0.04:
            return self.rng.choice(BAD_TEXTS)
        if r < 0.05:
            return ""
        if r < 0.055:
            return "x" * (MAX_TEXT_CHARS + self.rng.choice((1, 50)))
        if r < 0.056:
            return "y" * MAX_TEXT_CHARS
        words = self.rng.choices(WORDS, k=self.rng.randint(1, 12))
        sep = self.rng.choice((" ", " ", "\n", "\t", "\r\n"))
        return sep.join(words)

    def new_path(self) -> str:
        if self.chance(0.08):
            return self.rng.choice(BAD_NAMES)
        depth = self.rng.randint(1, 3)
        names = [self.rng.choice(NAMES) for _ in range(depth)]
        if self.chance(0.3):
            names[-1] += str(self.rng.randint(0, 99))
        sep = "/" if not self.chance(0.05) else "//"
        return ("./" if self.chance(0.03) else "") + sep.join(names)

    def ref(self, ws: Workspace) -> str:
        r = self.rng.random()
        nodes = ws.all_nodes()
        if r < 0.45 and len(ws):
            node = self.rng.choice(nodes)
            return node.id if self.chance(0.5) or not node.active else node.path
        if r < 0.8 and len(ws):
            return self.rng.choice([n for n in nodes if n.active] or nodes).path
        if r < 0.9:
            return self.rng.choice(("ghost", "n99999", "s404", "notes/missing"))
        return self.rng.choice(BAD_NAMES)

    def authored(self, ws: Workspace, kinds: tuple[str, ...] = ("synthetic", "directory")) -> str:
        """Mostly a node the agent may change (synthetic or directory), else any reference."""
        nodes = [n for n in ws if n.kind in kinds]
        if nodes and self.chance(0.6):
            node = self.rng.choice(nodes)
            return node.id if self.chance(0.5) else node.path
        return self.ref(ws)

    def refs(self, ws: Workspace, hi: int) -> list[str]:
        n = self.rng.randint(MAX_LINK_MANY_TARGETS + 1, MAX_LINK_MANY_TARGETS + 20) if self.chance(0.02) else \
            self.rng.randint(0, hi)
        return [self.ref(ws) for _ in range(n)]

    def doc_id(self, ws: Workspace) -> str:
        r = self.rng.random()
        if r < 0.6:
            self.doc_serial += 1
            return f"s{self.doc_serial}"
        if r < 0.8:
            return f"n{ws.meta.next_serial + self.rng.randint(0, 3)}"  # ids the next folders would take
        if r < 0.9 and len(ws):
            return self.rng.choice(ws.all_nodes()).id
        return self.rng.choice(BAD_NAMES)

    def valid_kind(self, ws: Workspace, kind: str) -> dict[str, Any]:
        ref, text, path = (lambda: self.ref(ws)), self.text, self.new_path
        match kind:
            case "add":
                out = {"text": text(), "links": self.refs(ws, 3), "provenance": self.refs(ws, 2)}
                if self.chance(0.7):
                    out["path"] = path()
                return out
            case "edit":
                return {"target": self.authored(ws), "text": text()}
            case "delete":
                return {"target": self.authored(ws)}
            case "link":
                return {"source": self.authored(ws), "target": ref()}
            case "unlink":
                linked = [n for n in ws if n.links]
                if linked and self.chance(0.6):
                    node = self.rng.choice(linked)
                    return {"source": node.id, "target": self.rng.choice(node.links)}
                return {"source": self.authored(ws), "target": ref()}
            case "link_many":
                return {"source": self.authored(ws), "targets": self.refs(ws, 5)}
            case "move":
                return {"target": self.authored(ws), "new_path": path()}
            case "make_dir":
                return {"path": path(), "readme": text()}
            case "create_file":
                return {"path": path(), "text": text(), "sources": self.refs(ws, 3)}
            case "merge_files":
                files = [n.id for n in ws if n.kind == "synthetic"]
                children = self.rng.sample(files, min(len(files), self.rng.randint(1, 3))) \
                    if files and self.chance(0.6) else self.refs(ws, 3)
                return {"children": children, "path": path(), "text": text()}
            case _:
                out = {"id": self.doc_id(ws), "text": text()}
                if self.chance(0.6):
                    out["path"] = f"sessions/{out['id']}" if self.chance(0.7) else path()
                if self.chance(0.1):
                    out["origin"] = self.rng.choice(("orig", "x\ud83d", "o\x1b[0m", "fact 1"))
                return out

    def malformed(self, payload: dict[str, Any]) -> Any:
        """Break a payload one way or another."""
        r = self.rng.random()
        junk = self.rng.choice((None, 3, 2.5, True, [], {}, {"x": 1}, ["a", 1], "str", -1))
        if r < 0.2:
            return self.rng.choice((None, [], "add", 3, [payload]))
        if r < 0.4:
            payload["op"] = self.rng.choice(({"x": 1}, ["add"], None, 7, "rm", "ADD", "", "x" * 500))
            return payload
        if r < 0.6 and len(payload) > 1:
            key = self.rng.choice([k for k in payload if k != "op"])
            payload[key] = junk
            return payload
        if r < 0.8:
            payload[self.rng.choice(("x", "extra", "\ud83d", "k" * 300, "op2"))] = junk
            return payload
        required = [k for k in payload if k != "op"]
        if required:
            del payload[self.rng.choice(required)]
        return payload

    def payload(self, ws: Workspace) -> tuple[str, Any]:
        kind = self.rng.choice(KINDS)
        payload = {"op": kind, **self.valid_kind(ws, kind)}
        if self.chance(0.1):
            return kind, self.malformed(payload)
        return kind, payload


def initial_workspace(rng: random.Random) -> Workspace:
    """A random small corpus: raw documents in folders, either raw policy, guard on or off."""
    docs = []
    for i in range(rng.randint(4, 24)):
        folder = rng.choice(("raw", "raw/sub", "facts", "corpus/part1"))
        text = " ".join(rng.choices(WORDS, k=rng.randint(3, 15)))
        docs.append(Document(f"f{i}", text, path=f"{folder}/f{i}.txt"))
    policy = rng.choice(("immutable", "editable"))
    guard = NearDuplicateGuard(threshold=0.8) if rng.random() < 0.3 else None
    return Workspace.from_documents(docs, raw_policy=policy, guard=guard)  # type: ignore[arg-type]


def stored_unsafe(ws: Workspace, result: Any) -> str | None:
    """Why a node an op just wrote holds something the op boundary must refuse (None when it is clean)."""
    for node_id in (*result.created, *result.changed):
        node = ws.get_any(node_id)
        try:
            check_text(node.text, "text")
            for name in (node.id, node.path, node.origin or "", *node.links, *node.provenance):
                check_name(name, "name")
        except WorkspaceError as exc:
            return f"{node_id}: {exc}"
    return None


class Fuzz:
    """One fuzz run: counters, examples, and the episode state."""

    def __init__(self, seed: int, episode: int) -> None:
        self.rng = random.Random(seed)
        self.gen = PayloadGen(self.rng)
        self.episode = episode
        self.counts: Counter[str] = Counter()
        self.by_kind: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
        self.examples: dict[str, list[dict[str, str]]] = {k: [] for k in BREAKS}
        self.episodes = 0

    def fail(self, kind: str, payload: Any, why: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append({"payload": ascii(payload)[:300], "why": ascii(why)[:500]})

    def new_episode(self) -> None:
        self.ws = initial_workspace(self.rng)
        self.initial = self.ws.copy()
        self.replica = self.ws.copy()
        self.replica.guard = None
        self.episodes += 1

    def end_episode(self) -> None:
        """Full replay of the episode's trace, live and through a Parquet trace file."""
        try:
            if replay(self.initial, self.ws.trace).state() != self.ws.state():
                self.fail("replay_mismatches", "(episode)", "replay of the whole trace differs from the live store")
            with tempfile.TemporaryDirectory() as tmp:
                write_trace(self.ws.trace, Path(tmp) / "trace.parquet")
                codec.write_parquet(*self.ws.state(), Path(tmp) / "snapshot.parquet")
                if replay(self.initial, read_trace(Path(tmp) / "trace.parquet")).state() != self.ws.state():
                    self.fail("replay_mismatches", "(episode)", "replay of the trace read from Parquet differs")
                if codec.read_parquet(Path(tmp) / "snapshot.parquet") != self.ws.state():
                    self.fail("roundtrip_failures", "(episode)", "the Parquet snapshot read back differs")
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            self.fail("replay_mismatches", "(episode)", f"{type(exc).__name__}: {exc}")

    def step(self) -> None:
        kind, payload = self.gen.payload(self.ws)
        ws = self.ws
        before, version = ws.state(), ws.version
        try:
            result = ws.apply_payload(payload)
        except WorkspaceError:
            self.counts["rejected"] += 1
            self.by_kind[kind]["rejected"] += 1
            if ws.state() != before or ws.version != version:
                self.fail("invariant_breaks", payload, "a rejected op changed the store")
                self.new_episode()
            return
        except Exception as exc:  # noqa: BLE001 - anything but WorkspaceError is a finding
            self.fail("unexpected_exceptions", payload, f"{type(exc).__name__}: {exc}")
            self.new_episode()
            return
        self.counts["accepted"] += 1
        self.by_kind[kind]["accepted"] += 1
        self.check_applied(payload, result)

    def check_applied(self, payload: Any, result: Any) -> None:
        ws = self.ws
        state = ws.state()
        problems = invariant_violations(*state)
        unsafe = stored_unsafe(ws, result)
        over_cap = payload.get("op") == "add" and len(payload.get("links") or ()) > MAX_LINK_MANY_TARGETS
        if problems or unsafe or over_cap:
            why = "; ".join(problems[:3]) if problems else unsafe or f"add applied with {len(payload['links'])} links"
            self.fail("invariant_breaks", payload, why)
            self.new_episode()
            return
        entry = ws.trace[-1]
        try:
            self.replica.apply_payload(json.loads(json.dumps(entry.op)), verdicts=entry.verdicts)
            if self.replica.state() != state:
                self.fail("replay_mismatches", payload, "the replica replaying the trace entry differs")
                self.new_episode()
                return
        except Exception as exc:  # noqa: BLE001
            self.fail("replay_mismatches", payload, f"{type(exc).__name__}: {exc}")
            self.new_episode()
            return
        try:
            ws.content_hash()
            if codec.from_ipc_bytes(codec.table_to_ipc_bytes(ws.to_table())) != (state[0], state[1]):
                self.fail("roundtrip_failures", payload, "the Arrow round trip changed the snapshot")
                self.new_episode()
        except Exception as exc:  # noqa: BLE001
            self.fail("roundtrip_failures", payload, f"{type(exc).__name__}: {exc}")
            self.new_episode()

    def run(self, ops: int, progress: bool = False) -> None:
        self.new_episode()
        done_in_episode = 0
        for _ in tqdm(range(ops), desc="fuzzing ops", unit="op", disable=not progress, mininterval=2.0):
            self.step()
            done_in_episode += 1
            if done_in_episode >= self.episode:
                self.end_episode()
                self.new_episode()
                done_in_episode = 0
        self.end_episode()


def run(ops: int, seed: int = 0, episode: int = 400, progress: bool = False) -> dict[str, Any]:
    """Fuzz `ops` payloads; returns the figures written to results.json."""
    fuzz = Fuzz(seed, episode)
    started = time.perf_counter()
    fuzz.run(ops, progress)
    wall = time.perf_counter() - started
    return {
        "ops": ops, "seed": seed, "episode_ops": episode, "episodes": fuzz.episodes,
        "accepted": fuzz.counts["accepted"], "rejected": fuzz.counts["rejected"],
        **{k: fuzz.counts[k] for k in BREAKS},
        "by_kind": {k: dict(v) for k, v in fuzz.by_kind.items()},
        "examples": {k: v for k, v in fuzz.examples.items() if v},
        "wall_s": wall, "ops_per_s": ops / wall if wall else None,
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=100_000, help="payloads to apply")
    parser.add_argument("--out", required=True, help="folder for results.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episode", type=int, default=400, help="ops before the store starts afresh")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    results = run(args.ops, args.seed, args.episode, progress=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=True) + "\n", encoding="utf-8")
    breaks = {k: results[k] for k in BREAKS}
    log.info("%d ops (%d accepted, %d rejected) in %.1f s; breaks %s; wrote %s", results["ops"],
             results["accepted"], results["rejected"], results["wall_s"], breaks, out / "results.json")
    return results


if __name__ == "__main__":
    main()
