"""JAM researcher evaluation benchmark: every arm of paper 002's ablations on a Memory-Gym history.

    python benchmarks/researcher_eval_bench.py --out build/bench/researcher [--embedder hashing]
        [--speakers 6 --sessions 40 --seed 1] [--budget 20]

Runs `evaluate_researcher` with the scripted JAM researcher (the teacher
policy) on the generated history (default Memory-Gym size) and writes
OUT/results.json (every arm's source recall with CI, precision, answer in
context, rounds, budget exhaustion, latency, construction time, and the
hierarchical - flat paired CI), OUT/arms.png and OUT/arms.md. Timings are
machine-dependent: compare the ratios (hierarchical / flat latency).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from librarian.datasets.memorygym import MemoryGymConfig  # noqa: E402
from librarian.evaluation.memory_eval import ResearcherEvalConfig, evaluate_researcher  # noqa: E402
from librarian.evaluation.memory_report import arms_table, plot_arms  # noqa: E402
from librarian.evaluation.memory_tasks import memorygym_task  # noqa: E402
from librarian.models import make_backend  # noqa: E402

log = logging.getLogger("researcher_eval_bench")


def _write_json(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".json", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for results.json, arms.png and arms.md")
    p.add_argument("--embedder", default="minilm", choices=("minilm", "hashing"))
    p.add_argument("--speakers", type=int, default=6)
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--n-boot", type=int, default=2000)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    task = memorygym_task(MemoryGymConfig(speakers=a.speakers, sessions=a.sessions, seed=a.seed))
    log.info("Memory-Gym: %d sessions, %d questions; embedder %s", len(task.sessions), len(task.questions),
             a.embedder)
    cfg = ResearcherEvalConfig(embedder=a.embedder, budget=a.budget, n_boot=a.n_boot, seed=a.seed)
    t0 = time.perf_counter()
    result = evaluate_researcher([task], make_backend("scripted", policy="jam_researcher"), cfg)
    result["bench"] = {"speakers": a.speakers, "sessions": a.sessions, "seed": a.seed, "wall_s": time.perf_counter() - t0,
                       "researcher": "scripted jam_researcher", "python": platform.python_version(),
                       "machine": platform.machine(), "cpus": os.cpu_count()}
    _write_json(out / "results.json", result)
    plot_arms(result, out / "arms.png", title=f"Memory-Gym ({len(task.questions)} questions, {a.embedder})")
    table = arms_table(result)
    (out / "arms.md").write_text(table + "\n")
    print(table)
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
