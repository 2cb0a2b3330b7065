"""The builder exam: the flat store, the scripted builder and the policy at several stages, on held-out corpora.

Builders run on the rollout workers (greedy, one build per corpus; the
scripted one through the same worker as a teacher); every store is examined
by the probe pool's reader on the corpus's questions. The policy can be
examined at three stages of a run: `untrained_builder` (before SFT),
`sft_builder` (after SFT, before GRPO) and `trained_builder` (at the end);
`policy_builds` freezes a stage's workspaces when the run passes it. Rows:
`flat` (summary) and every builder compared with the flat store on the same
questions (F1, reader actions, rho with bootstrap CIs); `utilities` gives each
store's mean exam utility U (paper 000, the reward's correctness and costs)
with a bootstrap CI, and `differences` paired bootstrap CIs of U between
stores (trained - flat, trained - scripted, trained - untrained, ...). Per
corpus, `same_as_flat` says whether a builder's store is the flat store
itself (same content hash: the builder changed nothing).
"""

from __future__ import annotations

import statistics
from typing import Any

from librarian.cluster.builder_jobs import BuildJob
from librarian.evaluation.exam import compare, summarize
from librarian.evaluation.metrics.bootstrap import bootstrap_ci, paired_bootstrap_ci
from librarian.rl.protocols import ExamSession, RolloutSession
from librarian.workspace import Workspace
from librarian.workspace.snapshot import freeze

PAIRS = (("trained_builder", "flat"), ("scripted_builder", "flat"), ("trained_builder", "scripted_builder"),
         ("trained_builder", "untrained_builder"), ("trained_builder", "sft_builder"),
         ("sft_builder", "untrained_builder"))


def policy_builds(cfg: Any, s: RolloutSession, corpora: list, stage: str, min_version: int | None = None) -> dict[str, Any]:
    """`s` is the run's `RLSession`. The policy's greedy build of every exam corpus (weights of at least `min_version`, default: the latest
    published): corpus id -> the final snapshot and the build's figures."""
    version = s.version if min_version is None else min_version
    jobs = [BuildJob(f"exam-{stage}-{c.corpus_id}", c.corpus_id, c.docs, group_size=1, seed=cfg.seed,
                     min_version=version, greedy=True) for c in corpora]
    batch = s.rollout(jobs)
    return {c.corpus_id: _frozen(batch[f"exam-{stage}-{c.corpus_id}"][0]) for c in corpora}


def _frozen(record: Any) -> dict[str, Any]:
    traj = record.trajectory
    return {"final": record.final, "actions": traj.actions, "turns": len(traj.turns), "end": traj.end,
            "tokens": sum(len(t.response_ids) for t in traj.turns), "calls": [t.text for t in traj.turns]}


def run_exam(cfg: Any, s: ExamSession, corpora: list, probes: Any, stages: dict[str, dict] | None = None,
             n_boot: int = 500) -> tuple[list[dict], dict]:
    """Rows for the results table and the detail (per corpus, utilities, paired differences).

    `stages` holds earlier `policy_builds` (e.g. untrained_builder, sft_builder); the trained policy and the
    scripted builder are built here."""
    if not corpora:
        return [], {}
    scripted = [BuildJob(f"exam-scripted-{c.corpus_id}", c.corpus_id, c.docs, group_size=1, seed=cfg.seed,
                         greedy=True, teacher=cfg.sft.teacher, budget=cfg.exam.scripted_budget) for c in corpora]
    batch = s.rollout(scripted)
    builders = {"scripted_builder": {c.corpus_id: _frozen(batch[f"exam-scripted-{c.corpus_id}"][0]) for c in corpora},
                **(stages or {}), "trained_builder": policy_builds(cfg, s, corpora, "trained")}
    exams: dict[str, list] = {"flat": [], **{name: [] for name in builders}}
    per_question: dict[str, list[float]] = {name: [] for name in exams}
    detail: dict[str, Any] = {}
    for c in corpora:
        stores = {"flat": freeze(Workspace.from_documents(c.docs)),
                  **{name: built[c.corpus_id]["final"] for name, built in builders.items()}}
        detail[c.corpus_id] = {}
        flat_key = stores["flat"].key
        for name, data in stores.items():
            results = s.probe(data, c.questions)
            exams[name].extend(results)
            per_question[name].extend(probes.question_utility(r) for r in results)
            detail[c.corpus_id][name] = {"utility": probes.utility(data, c.corpus_id),
                                         "f1": statistics.fmean(r.f1 for r in results)}
            if name != "flat":
                detail[c.corpus_id][name]["same_as_flat"] = data.key == flat_key
    rows = [{"name": "flat", **summarize(exams["flat"]), "build_actions": 0.0}]
    for name, built in builders.items():
        row = {"name": name, **compare(exams[name], exams["flat"], n_boot=n_boot, seed=cfg.seed)}
        row["build_actions"] = statistics.fmean(b["actions"] for b in built.values())
        row["construction_tokens"] = sum(b["tokens"] for b in built.values())
        rows.append(row)
    builds = {name: [{"corpus": cid, **{k: v for k, v in b.items() if k != "final"}} for cid, b in built.items()]
              for name, built in builders.items()}  # each build's calls: what a policy did on which corpus
    return rows, {"corpora": detail, "builds": builds, **utility_figures(per_question, n_boot, cfg.seed)}


def utility_figures(per_question: dict[str, list[float]], n_boot: int, seed: int) -> dict[str, Any]:
    """Mean exam utility per store with a bootstrap CI, and paired bootstrap CIs of the differences in `PAIRS`."""
    utilities = {}
    for name, values in per_question.items():
        ci = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        utilities[name] = {"mean": ci.point, "ci": ci.as_list(), "n": len(values)}
    differences = {}
    for a, b in PAIRS:
        if per_question.get(a) and per_question.get(b):
            ci = paired_bootstrap_ci(per_question[a], per_question[b], n_boot=n_boot, seed=seed)
            differences[f"{a}-{b}"] = {"mean": ci.point, "ci": ci.as_list()}
    return {"utilities": utilities, "differences": differences}
