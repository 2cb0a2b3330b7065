"""Load test of `librarian serve --curate`: concurrent HTTP clients while curation swaps versions.

    python benchmarks/online_load.py --out build/bench/online_load              # 8 clients, 2 minutes
    python benchmarks/online_load.py --out DIR --duration 20 --clients 8        # the suite's short run

It builds a flat 200-person KBGym workspace, starts the real server
(`librarian serve WS --api --curate --curate-every 2`, uvicorn, in its own
process), and runs `--clients` threads that each ask KBGym questions over
HTTP and send the gold back as feedback, for `--duration` seconds, while the
server curates in the background and swaps versions. Then it stops the
server (Ctrl-C: in-flight requests finish) and checks:

- errors: every request answered 200;
- tagged: every answer names a version and its snapshot hash, and the pair
  is the one that version was saved with;
- whole versions: every answer is re-computed offline on the saved version it
  names (same reader, deterministic): answer, actions and files read must be
  identical; an answer read from a half-applied version (the edits partly
  there, or the index of one version with the nodes of another) would differ;
- the traffic log: every answered request appears exactly once (raw rows
  across all Parquet parts, before any de-duplication), every feedback too.

Figures go to `results.json` in `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from librarian.answering.answer import answer
from librarian.answering.config import AskConfig
from librarian.app.build import BuildConfig
from librarian.app.build import run as build_run
from librarian.app.corpus import AskItem
from librarian.app.workspace_dir import OpenedWorkspace
from librarian.datasets.kbgym.build import build_kbgym
from librarian.datasets.records import write_parquet
from librarian.online.versions import VersionStore
from librarian.online.workspace import load_index

ROOT = Path(__file__).resolve().parents[1]
PORT_LINE = re.compile(r"API on http://127\.0\.0\.1:(\d+)/docs")


def build_workspace(out: Path, people: int = 200, seed: int = 1) -> tuple[Path, list[Any]]:
    """A flat KBGym store as a build folder, and its questions."""
    kb = build_kbgym(people=people, seed=seed).bundle
    write_parquet(kb, out / "kb")
    ws = out / "ws"
    build_run(BuildConfig(corpus=str(out / "kb"), out_dir=str(ws), builder="flat", embedder="none", export=False))
    return ws, list(kb.questions)


def start_server(ws: Path, log_path: Path, every: float, timeout: float = 120.0) -> tuple[subprocess.Popen, str]:
    """`librarian serve WS --api --curate` on a free port; returns the process and its base URL."""
    cmd = [sys.executable, "-m", "librarian.cli", "serve", str(ws), "--api", "--curate", "--port", "0",
           "--embedder", "none", "--curate-every", str(every), "--curate-max", "20", "--check-min", "5",
           "--check-questions", "20", "--action-tolerance", "0.1"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    log = log_path.open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = PORT_LINE.search(log_path.read_text(errors="replace"))
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): {log_path.read_text()[-2000:]}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server did not start in {timeout} s: {log_path.read_text()[-2000:]}")


def client(url: str, questions: list[Any], seed: int, stop: threading.Event, out: list[dict], errors: list[str]) -> None:
    """Ask and send the gold back until `stop`; one record per answered request."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=120.0) as http:
        while not stop.is_set():
            q = rng.choice(questions)
            t0 = time.perf_counter()
            try:
                res = http.post("/ask", json={"question": q.question})
                if res.status_code != 200:
                    errors.append(f"ask {res.status_code}: {res.text[:200]}")
                    continue
                body = res.json()
                latency = time.perf_counter() - t0
                fb = http.post("/feedback", json={"request_id": body["request_id"], "gold": list(q.answers)})
                if fb.status_code != 200:
                    errors.append(f"feedback {fb.status_code}: {fb.text[:200]}")
                out.append({**body, "latency_s": latency, "feedback_id": fb.json().get("feedback_id"),
                            "at": time.time()})
            except httpx.HTTPError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")


def raw_ids(folder: Path, column: str) -> Counter:
    """How often each id appears over every part of a log (no de-duplication)."""
    counts: Counter = Counter()
    for part in sorted(folder.glob("part-*.parquet")):
        counts.update(pq.read_table(part, columns=[column]).column(column).to_pylist())
    return counts


def recompute(ws: Path, answers: list[dict]) -> dict[str, Any]:
    """Re-answer every logged question offline on the saved version it names; count any difference."""
    store = VersionStore(ws)
    by_version: dict[int, list[dict]] = {}
    for a in answers:
        by_version.setdefault(a["version"], []).append(a)
    hashes, mismatches, checked = {}, [], 0
    for v, recs in sorted(by_version.items()):
        src = store.load(v)
        hashes[v] = src.content_hash()
        opened = OpenedWorkspace(src, store.paths(v).snapshot, ws, load_index(store.paths(v).index, None), version=v)
        again = answer(opened, [AskItem(r["request_id"], r["question"]) for r in recs], AskConfig(reader="kbgym"))
        for r, g in zip(recs, again, strict=True):
            checked += 1
            if r["snapshot_hash"] != hashes[v] or (r["answer"], r["actions"], r["files_read"]) != \
                    (g["answer"], g["actions"], g["files_read"]):
                mismatches.append({"request_id": r["request_id"], "version": v})
    return {"checked": checked, "mismatches": len(mismatches), "mismatch_examples": mismatches[:5],
            "versions_answered_on": sorted(by_version)}


def run(out: Path, clients: int = 8, duration: float = 120.0, every: float = 2.0) -> dict[str, Any]:
    """The whole load test; returns (and writes) its figures."""
    out.mkdir(parents=True, exist_ok=True)
    ws, questions = build_workspace(out)
    proc, url = start_server(ws, out / "server.log", every)
    answers: list[dict] = []
    errors: list[str] = []
    stop = threading.Event()
    threads = [threading.Thread(target=client, args=(url, questions, i, stop, answers, errors)) for i in range(clients)]
    started = time.time()
    for t in threads:
        t.start()
    time.sleep(duration)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.time() - started
    proc.send_signal(signal.SIGINT)  # graceful: in-flight requests finish, the curation thread stops
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = None
    asks = raw_ids(ws / "online" / "traffic" / "asks", "request_id")
    feedback = raw_ids(ws / "online" / "traffic" / "feedback", "feedback_id")
    sent = Counter(a["request_id"] for a in answers)
    curations = pq.read_table(ws / "online" / "curations").to_pylist() if (ws / "online" / "curations").is_dir() else []
    swaps = sorted(r["at"] for r in curations if r["decision"] == "swapped" and started <= r["at"] <= started + elapsed)
    check = recompute(ws, answers)
    store = VersionStore(ws)
    saved = {v: store.info(v).get("snapshot_hash") for v in store.numbers()}
    latencies = sorted(a["latency_s"] for a in answers)
    results = {
        "clients": clients, "duration_s": round(elapsed, 1), "curate_every_s": every,
        "requests": len(answers), "errors": len(errors), "error_examples": errors[:5],
        "requests_per_s": len(answers) / elapsed if elapsed else 0.0,
        "latency_p50_s": latencies[len(latencies) // 2] if latencies else None,
        "latency_p95_s": latencies[int(len(latencies) * 0.95)] if latencies else None,
        "untagged": sum(1 for a in answers if a.get("version") is None or not a.get("snapshot_hash")),
        "tag_hash_mismatch": sum(1 for a in answers if a["version"] != 0 and saved.get(a["version"]) != a["snapshot_hash"]),
        "versions_seen": len({a["version"] for a in answers}),
        "answers_per_version": dict(sorted(Counter(a["version"] for a in answers).items())),
        "swaps_during_load": len(swaps),
        "mean_s_between_swaps": (swaps[-1] - swaps[0]) / (len(swaps) - 1) if len(swaps) > 1 else None,
        "rounds": dict(Counter(r["decision"] for r in curations)),
        "half_applied": check["mismatches"], "recomputed": check["checked"],
        "log_rows": sum(asks.values()), "log_missing": sum(1 for rid in sent if asks[rid] == 0),
        "log_duplicates": sum(1 for c in asks.values() if c > 1), "log_unanswered": sum(1 for r in asks if r not in sent),
        "feedback_rows": sum(feedback.values()), "feedback_sent": sum(1 for a in answers if a["feedback_id"]),
        "feedback_duplicates": sum(1 for c in feedback.values() if c > 1),
        "server_exit": code,
    }
    results["ok"] = (results["errors"] == 0 and results["untagged"] == 0 and results["tag_hash_mismatch"] == 0
                     and results["half_applied"] == 0 and results["log_missing"] == 0
                     and results["log_duplicates"] == 0 and results["log_rows"] == results["requests"]
                     and results["feedback_rows"] == results["feedback_sent"] and results["swaps_during_load"] > 0)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for the workspace, the server log and results.json")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load")
    p.add_argument("--curate-every", type=float, default=2.0, help="the server's --curate-every")
    args = p.parse_args(argv)
    results = run(Path(args.out), args.clients, args.duration, args.curate_every)
    print(json.dumps(results, indent=2))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
