"""Probe benchmark: reader episodes per second in a plain loop, with 1 Ray probe worker, and with 2.

    python benchmarks/probe_bench.py --out build/bench/probe [--people 200] [--repeats 4]

The scripted KBGym reader answers the test_in questions (x `--repeats`) on
the flat KBGym store. Each arm is warmed first (the snapshot opened and
indexed, the backend built), then timed `--rounds` times; the best round
counts. Targets on 2 cores: 2 workers >= 1.7x one worker; one worker within
15% of the plain loop. Writes OUT/results.json with `probe_eps_plain`,
`probe_eps_1w`, `probe_eps_2w`, the ratios, the load average and the config.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
log = logging.getLogger("probe_bench")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--people", type=int, default=200)
    p.add_argument("--repeats", type=int, default=8, help="episodes per question")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chunk", type=int, default=25)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from librarian.cluster import ProbePool
    from librarian.datasets import to_documents
    from librarian.datasets.kbgym.build import build_kbgym
    from librarian.evaluation.exam import ExamRunner, ReaderSpec, run_local, snapshot_bytes
    from librarian.workspace import Workspace

    kb = build_kbgym(people=args.people, seed=1)
    ws = Workspace.from_documents([replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)],
                                  raw_policy="editable")
    questions = kb.bundle.split("test_in")
    data = snapshot_bytes(ws)
    spec = ReaderSpec()
    episodes = len(questions) * args.repeats

    def timed(fn) -> float:
        best = float("inf")
        for r in range(args.rounds):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
            log.info("  round %d: %.3f s", r + 1, time.perf_counter() - t0)
        return episodes / best

    load_before = os.getloadavg()
    runner = ExamRunner(spec)
    reference = run_local(data, questions, spec, args.repeats, runner, chunk=args.chunk)  # warm-up
    log.info("plain loop: %d episodes", episodes)
    eps = {"plain": timed(lambda: run_local(data, questions, spec, args.repeats, runner, chunk=args.chunk))}
    agree = True
    for n in (1, 2):
        pool = ProbePool(spec, workers=n, chunk=args.chunk, num_cpus=2)
        pool.ready()
        agree &= pool.run(data, questions, args.repeats) == reference  # warm-up: every worker loads the snapshot
        log.info("%d Ray probe worker(s): %d episodes", n, episodes)
        eps[f"{n}w"] = timed(lambda pool=pool: pool.run(data, questions, args.repeats))
        pool.close()
    results = {
        "probe_eps_plain": eps["plain"], "probe_eps_1w": eps["1w"], "probe_eps_2w": eps["2w"],
        "ratio_2w_over_1w": eps["2w"] / eps["1w"], "ratio_1w_over_plain": eps["1w"] / eps["plain"],
        "target_2w_over_1w": 1.7, "target_1w_over_plain": 0.85,
        "meets_2w_target": eps["2w"] / eps["1w"] >= 1.7, "meets_1w_target": eps["1w"] / eps["plain"] >= 0.85,
        "results_agree": agree, "episodes": episodes,
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "cpus": os.cpu_count(), "python": platform.python_version(), "config": vars(args),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for k in ("probe_eps_plain", "probe_eps_1w", "probe_eps_2w", "ratio_2w_over_1w", "ratio_1w_over_plain"):
        print(f"{k}: {results[k]:.2f}")
    print(f"load average {load_before} -> {results['load_average_after']}; results agree: {agree}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
