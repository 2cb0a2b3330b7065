"""Builder rollout throughput on Ray: turns/s with 1 and with 2 `BuilderRolloutWorker`s on the same jobs.

    python benchmarks/rollout_workers_bench.py --out build/bench/rollout_workers [--model tiny --jobs 8]

Each pool first builds one warm-up job per worker (model load and first
generate excluded), then `--jobs` build jobs (G builds of one KBGym corpus
each, the builder role, `--budget` turns, `--max-new-tokens` a turn) are
timed end to end through `RolloutPool.run`. The 2-worker figure is reported
against the 1-worker one measured in the same run (`rollout_2w_vs_1w_ratio`;
on a 2-core machine each worker gets one torch thread). OUT/results.json:
`rollout_turns_per_s_1w`, `rollout_turns_per_s_2w`, the ratio, and the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob  # noqa: E402
from librarian.cluster.builder_worker import BuilderRolloutWorker  # noqa: E402
from librarian.cluster.rollout_pool import RolloutPool  # noqa: E402
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym  # noqa: E402
from librarian.pipelines.builder.corpora import make_corpora  # noqa: E402
from librarian.rewards.construction import RewardConfig  # noqa: E402


def measure(workers: int, args: argparse.Namespace, corpus) -> dict[str, float]:
    spec = BuilderRolloutConfig(options={"model": args.model}, budget=args.budget, max_new_tokens=args.max_new_tokens,
                                torch_threads=max(1, (os.cpu_count() or 2) // workers), constrained=False,
                                content_executor="none")
    pool = RolloutPool(BuilderRolloutWorker, (spec, RewardConfig(every=args.budget + 1)), [{"num_cpus": 0.5}] * workers)
    pool.ready()
    jobs = lambda tag, n: [BuildJob(f"{tag}{i}", corpus.corpus_id, corpus.docs, args.group, seed=i)  # noqa: E731
                           for i in range(n)]
    pool.run(jobs("warm", workers))
    start = time.perf_counter()
    batch = pool.run(jobs("job", args.jobs))
    wall = time.perf_counter() - start
    pool.close()
    turns = sum(len(r.trajectory.turns) for recs in batch.values() for r in recs)
    tokens = sum(len(t.response_ids) for recs in batch.values() for r in recs for t in r.trajectory.turns)
    print(f"{workers} worker(s): {turns} turns, {tokens} tokens in {wall:.1f} s -> {turns / wall:.2f} turns/s")
    return {"turns": turns, "tokens": tokens, "wall_s": wall, "turns_per_s": turns / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json")
    parser.add_argument("--model", default="tiny", help="hf model: tiny | smollm2 | a folder")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()

    import ray

    kb = build_kbgym(people=60, seed=1, sizes=SplitSizes(train=30, test_in=20, test_out=10, eval_in=5, eval_out=5))
    corpus = make_corpora(kb, 1, questions=2, docs=10, splits=("train",), seed=1, prefix="c")[0]
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    try:
        one = measure(1, args, corpus)
        two = measure(2, args, corpus)
    finally:
        ray.shutdown()
    results = {"rollout_turns_per_s_1w": one["turns_per_s"], "rollout_turns_per_s_2w": two["turns_per_s"],
               "rollout_2w_vs_1w_ratio": two["turns_per_s"] / one["turns_per_s"], "one_worker": one,
               "two_workers": two, "settings": vars(args), "cpus": os.cpu_count(), "machine": platform.machine()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"2 workers vs 1: {results['rollout_2w_vs_1w_ratio']:.2f}x; wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
