"""The builder exam: flat store vs scripted builder vs trained builder on held-out corpora.

Both builders run on the rollout workers (greedy, one build per corpus; the
scripted one through the same worker as a teacher); every store is examined
by the probe pool's reader on the corpus's questions. Rows: `flat`
(summary), `scripted_builder` and `trained_builder` (compared with the flat
store on the same questions: F1, reader actions, rho with bootstrap CIs).
"""

from __future__ import annotations

import statistics
from typing import Any


def run_exam(cfg: Any, s: Any, corpora: list, probes: Any, n_boot: int = 500) -> tuple[list[dict], dict]:
    """Rows for the results table and per-corpus detail."""
    from librarian.cluster.rollout_worker import BuildJob, snapshot
    from librarian.evaluation.exam import compare, summarize
    from librarian.workspace import Workspace

    if not corpora:
        return [], {}
    scripted = [BuildJob(f"exam-scripted-{c.corpus_id}", c.corpus_id, c.docs, 1, cfg.seed, -1, [], True,
                         cfg.sft.teacher, cfg.exam.scripted_budget) for c in corpora]
    trained = [BuildJob(f"exam-trained-{c.corpus_id}", c.corpus_id, c.docs, 1, cfg.seed, s.sync.version, [], True)
               for c in corpora]
    batch = s.rollouts.run(scripted + trained, s.sync.box)
    exams: dict[str, list] = {"flat": [], "scripted_builder": [], "trained_builder": []}
    builds: dict[str, list] = {"flat": [], "scripted_builder": [], "trained_builder": []}
    detail: dict[str, Any] = {}
    for c in corpora:
        qs = c.questions
        stores = {"flat": snapshot(Workspace.from_documents(c.docs)),
                  "scripted_builder": batch[f"exam-scripted-{c.corpus_id}"][0].final,
                  "trained_builder": batch[f"exam-trained-{c.corpus_id}"][0].final}
        detail[c.corpus_id] = {}
        for name, data in stores.items():
            results = s.probe_run(data, qs, 1)
            exams[name].extend(results)
            detail[c.corpus_id][name] = {"utility": probes.utility(data, c.corpus_id),
                                         "f1": statistics.fmean(r.f1 for r in results)}
        for name, job in (("scripted_builder", "exam-scripted-"), ("trained_builder", "exam-trained-")):
            traj = batch[f"{job}{c.corpus_id}"][0].trajectory
            builds[name].append({"actions": traj.actions, "turns": len(traj.turns), "end": traj.end,
                                 "tokens": sum(len(t.response_ids) for t in traj.turns)})
    rows = [{"name": "flat", **summarize(exams["flat"]), "build_actions": 0.0}]
    for name in ("scripted_builder", "trained_builder"):
        row = {"name": name, **compare(exams[name], exams["flat"], n_boot=n_boot, seed=cfg.seed)}
        row["build_actions"] = statistics.fmean(b["actions"] for b in builds[name])
        row["construction_tokens"] = sum(b["tokens"] for b in builds[name])
        rows.append(row)
    return rows, {"corpora": detail, "builds": builds}
