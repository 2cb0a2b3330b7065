"""Probe benchmark: reader episodes per second in a plain loop, with 1 Ray probe worker, and with 2.

    python benchmarks/probe_bench.py --out build/bench/probe [--readers scripted,tiny] [--people 200]

Two readers on the flat KBGym store of `--people` people, test_in questions:

- `scripted`: the scripted KBGym reader (about 5 ms an episode on a quiet
  core): it shows the pool's per-chunk overhead, which dominates such cheap
  episodes (`--repeats` episodes a question);
- `tiny`: the tiny random hf model as the reader (`--tiny-tokens` new tokens,
  one action, one episode at a time): episodes that cost what a model
  reader's do, where the pool should scale with its workers
  (`--tiny-questions` questions).

Each arm is warmed first (the snapshot opened and indexed, the backend built),
then timed `--rounds` times, the arms' rounds interleaved (plain, 1 worker, 2
workers, plain, ...) so that a change in the machine's load hits them alike;
each arm's median round counts (`best_ratio_2w_over_1w`: best rounds). Per
reader, OUT/results.json
holds `eps_plain`, `eps_1w`, `eps_2w`, `ratio_2w_over_1w`,
`ratio_1w_over_plain`, `episode_ms` (the plain loop's time an episode) and
`chunk_overhead_ms` (what one worker's pool adds per chunk over the plain
loop: (1-worker time - plain time) / chunks), `call_ms` (the median round trip
of an empty actor call, the floor of that overhead), whether the results agree with
the plain loop, and the targets (2 workers >= 1.8x one worker for the tiny
reader, 1.7x for the scripted one), with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread a process: the plain loop and each worker alike

from librarian.cluster import ProbePool  # noqa: E402
from librarian.datasets import to_documents  # noqa: E402
from librarian.datasets.kbgym.build import build_kbgym  # noqa: E402
from librarian.rewards.probe_exam import ExamRunner, ReaderSpec, run_local, snapshot_bytes  # noqa: E402
from librarian.workspace import Workspace  # noqa: E402

log = logging.getLogger("probe_bench")
TARGETS = {"scripted": 1.7, "tiny": 1.8}


def measure(name: str, spec: Any, data: bytes, questions: list, repeats: int, chunk: int, rounds: int) -> dict:
    """Plain loop, 1 worker, 2 workers on the same episodes, rounds interleaved (plain, 1w, 2w, plain, ...) so
    that a change in the machine's load hits every arm alike; episodes/s of each arm's median round (and best)."""
    episodes = len(questions) * repeats
    chunks = -(-episodes // chunk)
    runner = ExamRunner(spec)
    reference = run_local(data, questions, spec, repeats, runner, chunk=chunk)  # warm-up
    pools = {n: ProbePool(spec, workers=n, chunk=chunk, num_cpus=3) for n in (1, 2)}  # 3 logical CPUs: both pools
    arms = {"plain": lambda: run_local(data, questions, spec, repeats, runner, chunk=chunk),
            **{f"{n}w": (lambda pool=pool: pool.run(data, questions, repeats)) for n, pool in pools.items()}}
    try:
        agree = True
        for pool in pools.values():
            pool.ready()
            agree &= pool.run(data, questions, repeats) == reference  # warm-up: every worker loads the snapshot
        calls = []
        for _ in range(50):  # an actor call's round trip: the floor of the per-chunk overhead
            t0 = time.perf_counter()
            pools[1].ready()
            calls.append(time.perf_counter() - t0)
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        log.info("%s reader: %d episodes in %d chunks, %d interleaved rounds", name, episodes, chunks, rounds)
        for r in range(rounds):
            for arm, fn in arms.items():
                t0 = time.perf_counter()
                fn()
                times[arm].append(time.perf_counter() - t0)
            log.info("  round %d: %s", r + 1, ", ".join(f"{a} {t[-1]:.2f} s" for a, t in times.items()))
    finally:
        for pool in pools.values():
            pool.close()
    secs = {arm: statistics.median(t) for arm, t in times.items()}
    eps = {arm: episodes / v for arm, v in secs.items()}
    return {"eps_plain": eps["plain"], "eps_1w": eps["1w"], "eps_2w": eps["2w"],
            "ratio_2w_over_1w": eps["2w"] / eps["1w"], "ratio_1w_over_plain": eps["1w"] / eps["plain"],
            "best_ratio_2w_over_1w": min(times["1w"]) / min(times["2w"]),
            "episode_ms": 1000 * secs["plain"] / episodes, "chunk_overhead_ms": 1000 * (secs["1w"] - secs["plain"]) / chunks,
            "call_ms": 1000 * statistics.median(calls),
            "round_s": times, "episodes": episodes, "chunks": chunks, "chunk": chunk, "results_agree": agree,
            "target_2w_over_1w": TARGETS[name], "meets_target": eps["2w"] / eps["1w"] >= TARGETS[name]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--readers", default="scripted,tiny", help="comma-separated: scripted, tiny")
    p.add_argument("--people", type=int, default=200)
    p.add_argument("--repeats", type=int, default=8, help="episodes per question (scripted reader)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--chunk", type=int, default=25, help="questions a call (scripted reader)")
    p.add_argument("--tiny-questions", type=int, default=16)
    p.add_argument("--tiny-tokens", type=int, default=8, help="the tiny reader's new tokens a turn")
    p.add_argument("--tiny-chunk", type=int, default=2)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    kb = build_kbgym(people=args.people, seed=1)
    ws = Workspace.from_documents([replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)],
                                  raw_policy="editable")
    questions = kb.bundle.split("test_in")
    data = snapshot_bytes(ws)
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for name in [r.strip() for r in args.readers.split(",") if r.strip()]:
        if name == "scripted":
            results[name] = measure(name, ReaderSpec(), data, questions, args.repeats, args.chunk, args.rounds)
        elif name == "tiny":
            spec = ReaderSpec(backend="hf", options={"model": "tiny"}, budget=1, max_new_tokens=args.tiny_tokens,
                              batch=1)
            results[name] = measure(name, spec, data, questions[: args.tiny_questions], 1, args.tiny_chunk,
                                    args.rounds)
        else:
            raise SystemExit(f"unknown reader {name!r}: scripted or tiny")
    results.update({"load_average_before": load_before, "load_average_after": os.getloadavg(),
                    "cpus": os.cpu_count(), "python": platform.python_version(), "config": vars(args)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name in ("scripted", "tiny"):
        if name in results:
            r = results[name]
            print(f"{name}: {r['episode_ms']:.1f} ms an episode; episodes/s plain {r['eps_plain']:.2f}, 1 worker "
                  f"{r['eps_1w']:.2f}, 2 workers {r['eps_2w']:.2f}; 2w/1w {r['ratio_2w_over_1w']:.2f} (target "
                  f"{r['target_2w_over_1w']}), 1w/plain {r['ratio_1w_over_plain']:.2f}; chunk overhead "
                  f"{r['chunk_overhead_ms']:.1f} ms (actor call {r['call_ms']:.1f} ms); results agree: {r['results_agree']}")
    print(f"load average {load_before} -> {results['load_average_after']} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
