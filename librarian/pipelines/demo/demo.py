"""`librarian demo`: the system at toy scale on one CPU machine, on embedded defaults.

Reads top to bottom: generate a KBGym universe -> a flat store of atomic
facts -> a hybrid search index that follows the store's trace -> the scripted
KBGym curator (through the episode loop and the curator's tools) building
index documents for the keys training questions name
-> the tree, structure statistics and a growth plot -> the snapshot, trace
and index on disk -> replay from disk, checked identical to the live store.
Writes `results.json` (figures + resolved config) and `store_growth.png`;
at the end `summary.md` (printed last) says what each part showed.

Part 2 (`jam=true`, the default; about a minute): JAM memory (`demo/jam.py`):
a Memory-Gym history memorized into a hierarchical workspace, one session
appended incrementally, the scripted researcher on paper 002's arms with
CIs, under `out_dir/jam`.

Part 3 (`rl=true`, the default): the RL builder demo of `demo/rl.py` — a
SmolLM2 builder with LoRA after a short SFT warm start, 2 rollout workers, a
probe worker and the learner on local Ray, 3 GRPO steps, an exam of flat vs
scripted vs trained builder, MLflow under `out_dir/rl`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from librarian.config import to_plain
from librarian.datasets import flat_documents
from librarian.datasets.kbgym.build import build_kbgym
from librarian.models import make_backend
from librarian.pipelines.demo.jam import JamDemoConfig, run_jam_demo
from librarian.pipelines.demo.rl import demo_config, run_rl_demo
from librarian.pipelines.demo.summary import demo_summary
from librarian.pipelines.entry import pipeline_main
from librarian.redact import redact
from librarian.roles import ToolContext, ToolEnv, kbgym_curator, run_episode
from librarian.roles.kbgym_passes import curation_task
from librarian.search.factory import SearchConfig, make_index
from librarian.search.sync import IndexSync
from librarian.tracking import Tracker
from librarian.workspace import Workspace, codec, read_trace, replay, views, write_trace
from librarian.workspace.growth import store_growth
from librarian.workspace.invariants import invariant_violations
from librarian.workspace.stats import structure_stats

log = logging.getLogger("librarian.demo")
COVERAGE = ("the share of the facts an index document links to directly (one hop), or through one more document "
            "(two hops)")


@dataclass
class DemoConfig:
    """What `librarian demo` runs; override any field as key=value."""

    out_dir: str = "build/demo"
    people: int = 200
    seed: int = 1
    curate_questions: int = 40  # train questions whose keys the scripted curator indexes
    curator_budget: int = 30  # actions per curation pass (paper 001's N2)
    search: SearchConfig = field(default_factory=SearchConfig)
    show_tree_lines: int = 25
    jam: bool = True  # part 2: JAM memory with the scripted researcher (about a minute)
    memory: JamDemoConfig = field(default_factory=JamDemoConfig)  # the JAM part's history, embedder, budget
    rl: bool = True  # part 3: the RL builder demo (configs/demo.yaml; about 12 minutes on 2 cores)
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else demo)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir)
    rl_overrides: dict = field(default_factory=dict)  # part 3: changes to that preset, e.g. rl_overrides.steps=1


def run(cfg: DemoConfig) -> dict:
    """Run the demo; returns the figures also written to `results.json`."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    log.info("1/6 generating a KBGym universe of %d people (seed %d)", cfg.people, cfg.seed)
    kbgym = build_kbgym(people=cfg.people, seed=cfg.seed)
    docs = flat_documents(kbgym.corpus)
    train = [q for q in kbgym.bundle.questions if q.split == "train"][: cfg.curate_questions]

    log.info("2/6 building the flat store (%d atomic facts) and its %s search index", len(docs), cfg.search.backend)
    ws = Workspace.from_documents(docs, raw_policy="editable")
    initial = ws.copy()
    index = make_index(cfg.search)
    sync = IndexSync(index, ws)
    sync.end_iteration()

    log.info("3/6 scripted curation: index documents for the keys of %d training questions", len(train))
    curator, role = make_backend("scripted", policy="kbgym_curator"), kbgym_curator(budget=cfg.curator_budget)
    ctx = ToolContext(ws, index, sync)
    passes = []
    for question in tqdm(train, desc="curating", unit="question"):
        passes.append(run_episode(ToolEnv(role, ctx, curation_task(question.question)), curator, role))
        sync.end_iteration()
    built = [n.id for n in ws if n.kind == "synthetic"]

    stats = structure_stats(ws)
    problems = invariant_violations(*ws.state())
    print(views.ls(ws, "").text)
    tree = views.tree(ws, "", max_depth=1).text.splitlines()
    print("\n".join(tree[: cfg.show_tree_lines] + ([f"  ... ({len(tree) - cfg.show_tree_lines} more lines)"]
                                                  if len(tree) > cfg.show_tree_lines else [])))
    example = built[0] if built else None
    if example is not None:
        print("\n" + views.read(ws, example, mode="kbgym").text[:600])

    log.info("4/6 writing the snapshot, trace and index to %s", out)
    codec.write_parquet(*initial.state(), out / "initial.parquet")
    codec.write_parquet(*ws.state(), out / "snapshot.parquet")
    write_trace(ws.trace, out / "trace.parquet")
    sync.save(out / "index")

    log.info("5/6 replaying the trace from disk over the initial store")
    t = time.perf_counter()
    reloaded_initial = Workspace.from_state(*codec.read_parquet(out / "initial.parquet"))
    rebuilt = replay(reloaded_initial, read_trace(out / "trace.parquet"))
    replay_s = time.perf_counter() - t
    live_hash = ws.content_hash()
    identical = rebuilt.content_hash() == live_hash == codec.content_hash(*codec.read_parquet(out / "snapshot.parquet"))

    log.info("6/6 plotting the store's growth along the trace")
    plot_store_growth(store_growth(initial, ws.trace), out / "store_growth.png")

    example_query = ws.get(example).text if example is not None else "job"
    hits = index.search(example_query, k=5, mode="hybrid" if cfg.search.embedder != "none" else "bm25")
    results = {
        "docs": len(docs),
        "questions_curated": len(train),
        "ops_applied": ws.version,
        "index_documents": len(built),
        "curator_actions": sum(t.actions for t in passes),
        "links": stats.total_links,
        "coverage_one_hop": stats.coverage_one_hop,
        "coverage_two_hop": stats.coverage_two_hop,
        "coverage_definition": COVERAGE,
        "invariant_violations": len(problems),
        "replay_identical": identical,
        "replay_s": replay_s,
        "snapshot_hash": live_hash,
        "search_example": {"query": example_query, "top_hits": [h.path for h in hits]},
        "structure": stats.as_dict(),
        "elapsed_s": time.perf_counter() - started,
        "config": redact(to_plain(cfg)),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\n{len(docs)} facts, {ws.version} curation ops, {len(built)} index documents, "
          f"{stats.total_links} links; coverage {stats.coverage_one_hop:.1%} one hop, {stats.coverage_two_hop:.1%} two hops"
          f"\n(coverage: {COVERAGE})")
    print(f"hybrid search for {example_query!r}: {', '.join(h.path for h in hits[:3])}")
    print(f"replay of {ws.version} ops from disk: identical={identical} in {replay_s:.2f} s; invariants broken: {len(problems)}")
    print(f"wrote {out / 'results.json'} and {out / 'store_growth.png'}")
    if problems or not identical:
        raise SystemExit("demo failed: the store broke an invariant or did not replay identically")
    return results


def plot_store_growth(series: list, path: Path) -> None:
    """Authored documents alive, net documents added and links against curation steps (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p.step for p in series]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(steps, [p.authored_alive for p in series], label="index documents alive")
    left.plot(steps, [p.net_added for p in series], "--", label="net documents added")
    left.set_xlabel("curation op")
    left.set_ylabel("documents")
    left.legend()
    right.plot(steps, [p.links for p in series], color="tab:green")
    right.set_xlabel("curation op")
    right.set_ylabel("links")
    fig.suptitle("What the store accumulates (rebuilt by trace replay)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    """CLI entry: `librarian demo [--config FILE] [--out DIR] [key=value ...]`."""
    return pipeline_main("demo", __doc__, DemoConfig, run_all, argv)


def run_all(cfg: DemoConfig) -> dict:
    """Every part the config turns on, in one MLflow run; returns the merged results."""
    started = time.perf_counter()
    with Tracker(cfg.experiment, cfg.out_dir, cfg.tracking_uri or None, pipeline="demo") as tracker:
        tracker.log_config(cfg)
        results = run(cfg)
        if cfg.jam:
            results = run_jam_part(cfg, results)
        if cfg.rl:
            results = run_rl_part(cfg, results, started)
        summary = demo_summary(results)
        (Path(cfg.out_dir) / "summary.md").write_text(summary, encoding="utf-8")
        print("\n" + summary)
        tracker.log_metrics({k: v for k, v in results.items() if isinstance(v, int | float)}, 0)
        tracker.log_run_files(cfg.out_dir)
    return results


def run_jam_part(cfg: DemoConfig, results: dict) -> dict:
    """Part 2: JAM memory into `out_dir/jam`; its headline figures join `out_dir/results.json`."""
    jam = run_jam_demo(cfg.memory, Path(cfg.out_dir) / "jam")
    merged = {**results, "jam": {k: v for k, v in jam.items() if k != "arms"}}
    (Path(cfg.out_dir) / "results.json").write_text(json.dumps(merged, indent=2, default=str) + "\n", encoding="utf-8")
    return merged


def run_rl_part(cfg: DemoConfig, curation: dict, started: float) -> dict:
    """Part 3: the RL builder demo (the preset mirrored in `configs/demo.yaml`) into `out_dir/rl`.

    Merges its figures (`grpo_steps`, `rows`, `wall_s`) into `out_dir/results.json`.
    """
    rl = run_rl_demo(demo_config(str(Path(cfg.out_dir) / "rl"), dict(cfg.rl_overrides)))
    merged = {**curation, "grpo_steps": rl["grpo_steps"], "rows": rl["rows_brief"], "wall_s": time.perf_counter() - started,
              "rl": {k: v for k, v in rl.items() if k not in ("history", "rows_brief")}}
    out = Path(cfg.out_dir)
    (out / "results.json").write_text(json.dumps(merged, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nRL demo: {rl['grpo_steps']} GRPO steps; MLflow: {rl.get('mlflow', {}).get('tracking_uri')}; "
          f"report and plots under {out / 'rl'}; total {merged['wall_s'] / 60:.1f} min")
    return merged
