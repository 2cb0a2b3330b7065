"""Builder headroom: does the builder task leave room to learn? Flat store vs scripted builder vs a random one.

    python benchmarks/builder_headroom.py --out build/bench/headroom [--quick] [--config configs/learning_builder.yaml]
    python benchmarks/builder_headroom.py --config configs/learning_builder_transfer.yaml --out build/bench/headroom_transfer

Builds the task of a `train_builder` config (default `configs/learning_builder.yaml`, the preset of
`benchmarks/learning_bench.py`) in this process (no Ray), with the extractive content executor attached as
`rollout.content_executor: extractive` does (`pipelines/builder/headroom.py`), and examines three kinds of store
with the probe reader (`probe:` section):

- `flat`: the corpus as is;
- `scripted`: the config's SFT teacher (`sft.teacher`) with `exam.scripted_budget` actions;
- `random`: an untrained-looking builder in the same layout and budget: `create_file`s of 4 random listed files
  each (no text), a `merge_files` of them under a random title, then `stop`: as many files, no plan.

On the exam corpora it writes OUT/results.json with `exam_utility_flat|scripted|random`, `exam_f1_*`, reader
actions, per-template F1, `exam_scripted_minus_flat_ci` and `exam_random_minus_flat_ci` (paired bootstrap 95% CIs
over questions) and `headroom_ok`. For a config with `data.headroom` (the corpora are checked one by one,
`configs/learning_builder_transfer.yaml`) it also reports every set: each training, SFT, gate and hard exam corpus's
flat and scripted utility (`checks`), `every_corpus_has_headroom` (all of them missed by the flat store and solved
by the scripted builder), and on the keep set (corpora the flat store answers) the random builder against the flat
store, `keep_random_minus_flat` with its CI: how much partial, unplanned work breaks a store the reader already
answers. `--quick` uses at most 6 exam corpora.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from librarian.config import load_config, to_plain  # noqa: E402
from librarian.evaluation.exam import summarize  # noqa: E402
from librarian.evaluation.metrics.bootstrap import paired_bootstrap_ci  # noqa: E402
from librarian.models.scripted import tool_call_text  # noqa: E402
from librarian.models.scripted.builder import COMPACT_ITEMS, HeuristicBuilder  # noqa: E402
from librarian.models.scripted.kbgym import budget_from_prompt, transcript  # noqa: E402
from librarian.pipelines.builder.config import TrainBuilderConfig  # noqa: E402
from librarian.pipelines.builder.corpus_sets import corpus_sets  # noqa: E402
from librarian.pipelines.builder.headroom import reader_spec, scripted_builds  # noqa: E402
from librarian.rewards.construction import exam_utility  # noqa: E402
from librarian.rewards.probe_exam import ExamRunner, run_local  # noqa: E402
from librarian.workspace import Workspace  # noqa: E402

log = logging.getLogger("builder_headroom")
DEFAULT_CONFIG = "configs/learning_builder.yaml"


def random_builder(seed: int):
    """A policy in the compact layout that spends the budget on `create_file`s of 4 random listed files each
    (no text: the content executor writes it), one `merge_files` of them, then `stop`: as many files, no plan."""
    lister = HeuristicBuilder(compact=True)

    def raw_files(base: str, listing: str) -> list[str]:
        names = [line.split("  ")[1].strip() for line in listing.splitlines()[1:]
                 if line.endswith("chars") and "  raw  " in line]
        return [f"{base}/{n}" if base else n for n in names]

    def policy(messages: Any, tools: Any = None) -> str:
        budget = budget_from_prompt(messages) or 8
        used = sum(1 for m in messages if m["role"] == "assistant")
        events = [e for e in transcript(messages) if not e.error]
        task = next((m["content"] for m in messages if m["role"] == "user"), "")
        files = raw_files("", task.split("\nls ", 1)[1]) if "\nls " in task and "more)" not in task else []
        if not files and not any(e.name == "list" for e in events):
            return lister(messages, tools)  # the same `list` the scripted builder starts with
        files += [f for e in events if e.name == "list" for f in raw_files(e.arguments.get("path", ""), e.observation)]
        made = [e.arguments["path"] for e in events if e.name == "create_file"]
        rng = random.Random(f"{seed}:{used}")
        if used >= budget - 1 or not files:
            return tool_call_text("stop")
        if used >= budget - 2 and len(made) >= 2:
            return tool_call_text("merge_files", children=made[:COMPACT_ITEMS], path=f"notes-{rng.randrange(1000)}",
                                  instruction=f"Notes {rng.randrange(1000)}")
        picked = rng.sample(files, min(COMPACT_ITEMS, len(files)))
        return tool_call_text("create_file", path=f"notes/file-{len(made)}.md", sources=picked)

    policy.__name__ = "random_builder"
    return policy


def build(cfg: Any, corpora: list, policy: Any) -> list:
    """Each corpus built once by `policy` as the rollout workers would (budget `exam.scripted_budget`)."""
    return scripted_builds(corpora, policy, cfg.exam.scripted_budget, cfg.rollout.listing_lines,
                           cfg.rollout.max_items)


def measure(cfg: Any, corpora: list, n_boot: int = 2000) -> dict[str, Any]:
    """Flat / scripted / random stores of `corpora` examined by the probe reader; the figures for results.json."""
    runner = ExamRunner(reader_spec(cfg.probe, cfg.seed))
    weights = cfg.reward.weights()
    timings: dict[str, float] = {}
    stores: dict[str, list] = {"flat": [(Workspace.from_documents(c.docs), None) for c in corpora]}
    for name, policy in (("scripted", cfg.sft.teacher), ("random", random_builder(cfg.seed))):
        t = time.perf_counter()
        stores[name] = build(cfg, corpora, policy)
        timings[f"build_{name}_s"] = time.perf_counter() - t
    out: dict[str, Any] = {}
    per_q: dict[str, list[float]] = {}
    for name, built in stores.items():
        t = time.perf_counter()
        results, utils, by_template = [], [], defaultdict(list)
        for c, (ws, _) in zip(corpora, built, strict=True):
            res = run_local(ws, c.questions, runner.spec, runner=runner)
            results.extend(res)
            utils.append(exam_utility(res, weights))
            for r in res:
                by_template[r.template].append(r.f1)
        timings[f"exam_{name}_s"] = time.perf_counter() - t
        s = summarize(results)
        out[f"exam_utility_{name}"] = statistics.fmean(utils)
        out[f"exam_f1_{name}"] = s["f1"]
        out[f"exam_actions_{name}"] = s["actions"]
        out[f"exam_files_read_{name}"] = s["files_read"]
        out[f"f1_by_template_{name}"] = {k: statistics.fmean(v) for k, v in sorted(by_template.items())}
        per_q[name] = [exam_utility([r], weights) for r in results]
        if name != "flat":
            trajs = [tr for _, tr in built]
            out[f"build_actions_{name}"] = statistics.fmean(tr.actions for tr in trajs)
            out[f"build_files_{name}"] = statistics.fmean(sum(1 for n in ws if n.kind == "synthetic") for ws, _ in built)
            out[f"build_ends_{name}"] = sorted({tr.end for tr in trajs})
    for name in ("scripted", "random"):
        ci = paired_bootstrap_ci(per_q[name], per_q["flat"], n_boot=n_boot, seed=cfg.seed)
        out[f"exam_{name}_minus_flat"] = ci.point
        out[f"exam_{name}_minus_flat_ci"] = ci.as_list()
    out["exam_questions"] = len(per_q["flat"])
    out["timings"] = timings
    out["exam_scripted_minus_flat_ci_excludes_zero"] = bool(out["exam_scripted_minus_flat_ci"][0] > 0)
    out["headroom_ok"] = bool(out["exam_scripted_minus_flat_ci_excludes_zero"] and out["exam_utility_flat"] > 0.05
                              and out["exam_utility_scripted"] - out["exam_utility_flat"] >= 0.1)
    return out


def checked_sets(cfg: Any, sets: Any, n_boot: int = 2000) -> dict[str, Any]:
    """Every checked set's corpora with their flat and scripted utilities, whether each has headroom, and the
    random builder against the flat store on the keep set."""
    names = ("train", "teacher", "gate", "exam")
    checks = {name: {c.corpus_id: {"flat": sets.checks[c.corpus_id].flat,
                                   "scripted": sets.checks[c.corpus_id].scripted,
                                   "headroom": sets.checks[c.corpus_id].headroom}
                     for c in getattr(sets, name)} for name in names}
    out: dict[str, Any] = {"checks": checks, "set_sizes": {n: len(getattr(sets, n)) for n in (*names, "keep")}}
    out["every_corpus_has_headroom"] = all(v["headroom"] for name in names for v in checks[name].values())
    out["corpora_without_headroom"] = [cid for name in names for cid, v in checks[name].items() if not v["headroom"]]
    if sets.keep:
        keep = measure(cfg, sets.keep, n_boot=n_boot)
        out["keep_utility_flat"] = keep["exam_utility_flat"]
        out["keep_utility_random"] = keep["exam_utility_random"]
        out["keep_utility_scripted"] = keep["exam_utility_scripted"]
        out["keep_random_minus_flat"] = keep["exam_random_minus_flat"]
        out["keep_random_minus_flat_ci"] = keep["exam_random_minus_flat_ci"]
        out["keep_random_within_0.05_of_flat"] = abs(keep["exam_random_minus_flat"]) <= 0.05
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--config", default=DEFAULT_CONFIG)
    p.add_argument("--quick", action="store_true", help="at most 6 exam corpora")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    started = time.perf_counter()
    cfg = load_config(TrainBuilderConfig, args.overrides, config_file=args.config)
    if args.quick:
        cfg.data.exam_corpora = min(cfg.data.exam_corpora, 6)
    t = time.perf_counter()
    sets = corpus_sets(cfg)
    corpora_s = time.perf_counter() - t
    d = cfg.data
    log.info("task: %d exam corpora of %d questions (%s), %d files each (%s paths); reader budget %d; "
             "builder budget %d", len(sets.exam), d.questions_per_corpus, ", ".join(d.question_kinds) or "all kinds",
             d.docs_per_corpus, d.path_style, cfg.probe.budget, cfg.exam.scripted_budget)
    res = measure(cfg, sets.exam, n_boot=args.n_boot)
    res["timings"]["corpora_s"] = corpora_s
    if d.headroom:  # every corpus checked: headroom means every one has it and partial work is safe
        res.update(checked_sets(cfg, sets, n_boot=args.n_boot))
        res["headroom_ok"] = bool(res["every_corpus_has_headroom"] and res.get("keep_random_within_0.05_of_flat", True))
    res["wall_s"] = time.perf_counter() - started
    res.update({"config_file": args.config, "quick": args.quick, "exam_corpora": len(sets.exam),
                "docs_per_corpus": [len(c.docs) for c in sets.exam], "config": to_plain(cfg)})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True))
    report(res, out)
    return 0


def report(res: dict[str, Any], out: Path) -> None:
    """The figures on the console."""
    for name in ("flat", "scripted", "random"):
        log.info("%-9s utility %.3f  F1 %.3f  reader actions %.2f%s", name, res[f"exam_utility_{name}"],
                 res[f"exam_f1_{name}"], res[f"exam_actions_{name}"],
                 f"  (build: {res[f'build_actions_{name}']:.1f} actions, {res[f'build_files_{name}']:.1f} files)"
                 if name != "flat" else "")
    ci = res["exam_scripted_minus_flat_ci"]
    log.info("scripted - flat over %d questions: %.3f, 95%% CI %s; random - flat: %.3f, CI %s",
             res["exam_questions"], res["exam_scripted_minus_flat"], [round(x, 3) for x in ci],
             res["exam_random_minus_flat"], [round(x, 3) for x in res["exam_random_minus_flat_ci"]])
    if "checks" in res:
        for name, checks in res["checks"].items():
            log.info("%-7s %3d corpora: flat utility %s, scripted utility %s, headroom %s", name, len(checks),
                     sorted({round(v["flat"], 2) for v in checks.values()}),
                     sorted({round(v["scripted"], 2) for v in checks.values()}),
                     "every one" if all(v["headroom"] for v in checks.values()) else
                     f"missing on {[c for c, v in checks.items() if not v['headroom']]}")
        log.info("every_corpus_has_headroom=%s", res["every_corpus_has_headroom"])
        if "keep_random_minus_flat" in res:
            log.info("keep set (%d corpora the flat store answers): flat %.3f, random builder %.3f, scripted %.3f; "
                     "keep_random_minus_flat %.3f, CI %s", res["set_sizes"]["keep"], res["keep_utility_flat"],
                     res["keep_utility_random"], res["keep_utility_scripted"], res["keep_random_minus_flat"],
                     [round(x, 3) for x in res["keep_random_minus_flat_ci"]])
    rule = ("every corpus has headroom and the random builder keeps the keep set" if "checks" in res else
            "CI above zero, flat utility > 0.05 and >= 0.1 below scripted")
    log.info("headroom_ok=%s (%s); %.1f s; %s", res["headroom_ok"], rule, res["wall_s"], out / "results.json")


if __name__ == "__main__":
    raise SystemExit(main())
