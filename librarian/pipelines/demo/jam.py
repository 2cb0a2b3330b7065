"""Part 2 of `librarian demo`: JAM memory (paper 002) at toy scale, scripted researcher, embedded search.

A generated Memory-Gym history -> the memorizer's hierarchical workspace
(memos, a folder per group of speakers, READMEs built from the memos) -> one
more session appended incrementally (only its memo and its group's README
change) -> the scripted researcher on every arm of paper 002's ablation
(hierarchical, flat raw history, one-shot retrieval, no BM25, no dense) with
bootstrap CIs, latencies timed after a warm-up in a rotating arm order ->
`out_dir/jam/results.json`, `arms.png`, `arms.md` (opening with what the
paired differences against the full system show: a difference is named
only when its CI excludes 0).
Training the researcher is `librarian train_researcher` (docs/train_researcher.md).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from librarian.datasets.memorygym import MemoryGymConfig
from librarian.evaluation.memory_eval import ResearcherEvalConfig, evaluate_researcher
from librarian.evaluation.memory_report import arm_findings, arms_markdown, arms_table, plot_arms
from librarian.evaluation.memory_tasks import memorygym_task
from librarian.models import make_backend
from librarian.roles.memorizer import Memorizer
from librarian.workspace import views

log = logging.getLogger("librarian.demo")


@dataclass
class JamDemoConfig:
    """The JAM part's knobs (`jam_*` keys of `librarian demo`)."""

    speakers: int = 6
    sessions: int = 40
    seed: int = 1
    embedder: str = "minilm"
    budget: int = 20


def run_jam_demo(cfg: JamDemoConfig, out_dir: str | Path) -> dict[str, Any]:
    """Memorize, append a session, evaluate the arms; returns the figures written to `results.json`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = memorygym_task(MemoryGymConfig(speakers=cfg.speakers, sessions=cfg.sessions, seed=cfg.seed))
    log.info("JAM 1/3 memorizing %d sessions into a hierarchical workspace", len(task.sessions) - 1)
    memorizer = Memorizer()
    earlier = memorizer.memorize(task.sessions[:-1])
    grown = memorizer.append_session(earlier, replace(task.sessions[-1], path=None))
    changed = grown.changes_since(earlier.version)
    print(views.tree(grown, "memory", max_depth=1).text.splitlines()[0])
    print(views.open(grown, "memory").text[:500])
    log.info("JAM 2/3 the scripted researcher on paper 002's arms (%d questions)", len(task.questions))
    researcher = make_backend("scripted", policy="jam_researcher")
    ev = evaluate_researcher([task], researcher, ResearcherEvalConfig(embedder=cfg.embedder, budget=cfg.budget,
                                                                      n_boot=1000, seed=cfg.seed))
    log.info("JAM 3/3 writing the arms table and plot to %s", out)
    plot_arms(ev, out / "arms.png", title="JAM arms, scripted researcher (Memory-Gym)")
    findings = arm_findings(ev)
    (out / "arms.md").write_text(arms_markdown(ev), encoding="utf-8")
    print(arms_table(ev))
    arms = ev["arms"]
    results = {
        "sessions": len(task.sessions), "questions": ev["n_questions"],
        "append_ops": grown.version - earlier.version, "append_nodes_touched": len(changed.upserted),
        "source_recall_hierarchical": arms["hierarchical"]["source_recall"],
        "source_recall_hierarchical_ci": arms["hierarchical"]["source_recall_ci"],
        "source_recall_flat": arms["flat"]["source_recall"], "source_recall_flat_ci": arms["flat"]["source_recall_ci"],
        "hierarchical_minus_flat_ci": ev.get("hierarchical_minus_flat_ci"),
        "differences": ev.get("differences"), "findings": findings,
        "arms": arms,
    }
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(out / "results.json")
    print("JAM, what the arms show:\n" + "\n".join(f"  - {f}" for f in findings))
    print(f"JAM: appending one session applied {results['append_ops']} ops")
    return results
