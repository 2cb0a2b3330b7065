"""Dataset generation speed: KBGym at 500 people (all splits and gold checks) and PhantomWiki conversion.

Ratios are against references measured in the same run: KBGym's full build
against sampling its universe alone; PhantomWiki's conversion against the
official generator's own run. Usage: `python benchmarks/data_bench.py --out DIR`.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from librarian.datasets.kbgym import build_kbgym
from librarian.datasets.kbgym.gradient import gradient_groups
from librarian.datasets.kbgym.universe import UniverseConfig, generate_universe
from librarian.datasets.kbgym.verify import verify
from librarian.datasets.phantomwiki import PWConfig, convert, generate

log = logging.getLogger("data_bench")


def _timed(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_kbgym(people: int, seed: int, repeat: int) -> dict:
    def full():
        kb = build_kbgym(people, seed)
        problems = verify(kb.corpus, kb.bundle.questions)
        if problems:
            raise SystemExit(f"gold check failed: {problems[:3]}")
        gradient_groups(kb, n=30, seed=seed)
        return kb

    ref_s, _ = _timed(lambda: generate_universe(UniverseConfig(people=people, seed=seed)), repeat)
    full_s, kb = _timed(full, repeat)
    log.info("kbgym %d people: %.2fs (universe alone %.3fs)", people, full_s, ref_s)
    return {
        "kbgym_500_generate_s" if people == 500 else f"kbgym_{people}_generate_s": round(full_s, 4),
        "kbgym_universe_only_s": round(ref_s, 4),
        "kbgym_full_over_universe_ratio": round(full_s / ref_s, 2),
        "kbgym_docs": len(kb.corpus),
        "kbgym_questions_by_split": kb.bundle.splits(),
        "kbgym_target_30s_met": full_s <= 30.0,
    }


def bench_phantomwiki(seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        gen_s, raw = _timed(lambda: generate(Path(tmp) / "raw", PWConfig(seed=seed)), 1)
        conv_s, bundle = _timed(lambda: convert(raw, seed=seed), 3)
    log.info("phantomwiki: generator %.2fs, conversion %.4fs", gen_s, conv_s)
    return {
        "phantomwiki_generate_s": round(gen_s, 4),
        "phantomwiki_convert_s": round(conv_s, 4),
        "phantomwiki_convert_over_generate_ratio": round(conv_s / gen_s, 4),
        "phantomwiki_docs": len(bundle.corpus),
        "phantomwiki_questions": len(bundle.questions),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--people", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-phantomwiki", action="store_true")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    results: dict = {"config": vars(a)}
    results.update(bench_kbgym(a.people, a.seed, a.repeat))
    if not a.skip_phantomwiki:
        results.update(bench_phantomwiki(a.seed))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
