"""The builder exam: the flat store, the scripted builder and the policy at several stages, on held-out corpora.

Builders run on the rollout workers (the scripted one through the same
worker as a teacher); every store is examined by the probe reader on its
corpus's hidden questions. The policy can be examined at three stages of a
run: `untrained_builder` (before SFT), `sft_builder` (after SFT, before GRPO)
and `trained_builder` (at the end); `policy_builds` freezes a stage's
workspaces when the run passes it: one greedy build of every corpus and,
with `exam.samples` = k, k sampled builds (the same sampling seeds at every
stage, so the stages are compared on common random numbers).

The exam holds the hard corpora (the flat store misses them) and, with a
keep set, corpora the flat store answers. Outputs: `rows` (each builder's
greedy stores against the flat store: F1, reader actions, rho with bootstrap
CIs); per corpus and store the greedy and sampled utilities, the set
(`hard` | `keep`) and `same_as_flat` (the build changed nothing); `rates`
(`evaluation.exam_rates`: solve rates on hard corpora, break rates on the
keep set, paired differences, all with corpus-clustered CIs, greedy and
sampled); `gathered` (how much of the hidden question's support the best
synthetic file of a build holds, and how much else); `utilities` and
`differences` (per-question greedy utility, as before the keep set).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from librarian.cluster.builder_jobs import BuildJob
from librarian.evaluation.exam import compare, summarize
from librarian.evaluation.exam_rates import exam_rates
from librarian.evaluation.metrics.bootstrap import bootstrap_ci, paired_bootstrap_ci
from librarian.rl.protocols import ExamSession, RolloutSession
from librarian.rl.task import job_seed
from librarian.workspace import SnapshotView, Workspace
from librarian.workspace.snapshot import Snapshot, freeze

PAIRS = (("trained_builder", "flat"), ("scripted_builder", "flat"), ("trained_builder", "scripted_builder"),
         ("trained_builder", "untrained_builder"), ("trained_builder", "sft_builder"),
         ("sft_builder", "untrained_builder"))
EXAM_SEED_STEP = 90_000  # the exam's sampling seed: job_seed(seed, EXAM_SEED_STEP, 0), no GRPO step's


def policy_builds(cfg: Any, s: RolloutSession, corpora: list, stage: str, min_version: int | None = None) -> dict[str, Any]:
    """The policy's builds of every exam corpus (weights of at least `min_version`, default: the latest published):
    corpus id -> {"greedy": the greedy build, "samples": `exam.samples` sampled builds}, each frozen. The greedy
    builds of all corpora are one episode batch, the sampled ones another."""
    version = s.version if min_version is None else min_version
    k = int(getattr(cfg.exam, "samples", 0))
    parts = [(c.corpus_id, c.docs) for c in corpora]
    jobs = [BuildJob(f"exam-{stage}", "", [], group_size=1, seed=cfg.seed, min_version=version, greedy=True,
                     corpora=parts)]
    if k:
        jobs.append(BuildJob(f"exam-{stage}-k", "", [], group_size=k, seed=job_seed(cfg.seed, EXAM_SEED_STEP, 0),
                             min_version=version, corpora=parts))
    batch = s.rollout(jobs) if corpora else {}
    greedy = by_corpus(batch.get(f"exam-{stage}", []))
    sampled = by_corpus(batch.get(f"exam-{stage}-k", []))
    return {c.corpus_id: {"greedy": _frozen(greedy[c.corpus_id][0]),
                          "samples": [_frozen(r) for r in sampled.get(c.corpus_id, [])]} for c in corpora}


def by_corpus(records: list) -> dict[str, list]:
    """A job's records grouped by corpus id, each group in build order."""
    out: dict[str, list] = {}
    for r in records:
        out.setdefault(r.corpus_id, []).append(r)
    return out


def _frozen(record: Any) -> dict[str, Any]:
    traj = record.trajectory
    return {"final": record.final, "trajectory": traj, "actions": traj.actions, "turns": len(traj.turns),
            "end": traj.end, "tokens": sum(len(t.response_ids) for t in traj.turns),
            "calls": [t.text for t in traj.turns]}


def gathered(snap: Snapshot, support: set[str]) -> tuple[float, float]:
    """(recall, precision) of the synthetic file of a store that holds most of `support` (raw ids) among the raw
    documents it was made from; (0, 0) when no synthetic file cites any."""
    view = SnapshotView.from_ipc_bytes(snap.data)
    best = (0.0, 0.0)
    for node in view:
        if node.kind != "synthetic":
            continue
        cited = {i for i in node.provenance if (n := view.get(i)) is not None and n.kind == "raw"}
        if cited:
            hit = len(cited & support)
            best = max(best, (hit / len(support), hit / len(cited)))
    return best


def run_exam(cfg: Any, s: ExamSession, corpora: list, probes: Any, stages: dict[str, dict] | None = None,
             n_boot: int = 500, keep: list | None = None, samples_path: Path | None = None) -> tuple[list[dict], dict]:
    """Rows for the results table and the detail (see the module docstring).

    `corpora` are the hard exam corpora, `keep` the keep set; `stages` holds earlier `policy_builds` (e.g.
    untrained_builder, sft_builder) of both; the trained policy and the scripted builder are built here. With
    `samples_path`, the trained policy's sampled builds of the hard corpora go there (`write_samples`)."""
    keep = list(keep or [])
    every = list(corpora) + keep
    if not every:
        return [], {}
    scripted = BuildJob("exam-scripted", "", [], group_size=1, seed=cfg.seed, greedy=True, teacher=cfg.sft.teacher,
                        budget=cfg.exam.scripted_budget, corpora=[(c.corpus_id, c.docs) for c in every])
    teacher = by_corpus(s.rollout([scripted])["exam-scripted"])
    builders = {"scripted_builder": {c.corpus_id: {"greedy": _frozen(teacher[c.corpus_id][0]), "samples": []}
                                     for c in every},
                **(stages or {}), "trained_builder": policy_builds(cfg, s, every, "trained")}
    sets = {c.corpus_id: "hard" for c in corpora} | {c.corpus_id: "keep" for c in keep}
    detail = _per_corpus(every, builders, probes, sets)
    rows, per_question = _rows(cfg, s, every, builders, probes, n_boot)
    if samples_path is not None:
        write_samples(samples_path, builders["trained_builder"], list(corpora))
    stores = ["flat", *builders]
    rates = exam_rates(detail, [c.corpus_id for c in corpora], [c.corpus_id for c in keep], stores, PAIRS,
                       n_boot=max(n_boot, 2000), seed=cfg.seed)
    support = {c.corpus_id: {i for q in c.questions for i in q.support} for c in corpora}
    gather = {name: _gathered_means(built, support) for name, built in builders.items()}
    builds = {name: [{"corpus": cid, **_calls(b["greedy"]), "samples": [_calls(x) for x in b["samples"]]}
                     for cid, b in built.items()] for name, built in builders.items()}
    return rows, {"corpora": detail, "builds": builds, "rates": rates, "gathered": gather,
                  **utility_figures(per_question, n_boot, cfg.seed)}


def _calls(b: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in b.items() if k not in ("final", "trajectory")}


def write_samples(path: Path, built: dict[str, Any], corpora: list) -> int:
    """The sampled builds of `corpora` (token ids, log-probs, grammars) as JSON lines, for measuring the policy
    that made them against another (`learner.policy_shift`); how many were written."""
    rows = [json.dumps({"corpus": c.corpus_id, "trajectory": x["trajectory"].to_dict()})
            for c in corpora for x in built[c.corpus_id]["samples"]]
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def _per_corpus(every: list, builders: dict[str, dict], probes: Any, sets: dict[str, str]) -> dict[str, Any]:
    """Per corpus and store: its set, greedy utility, sampled utilities and whether the build changed nothing (every
    snapshot probed through the probe service, the distinct ones in one batch)."""
    flat = {c.corpus_id: freeze(Workspace.from_documents(c.docs)) for c in every}
    wanted = [(flat[c.corpus_id], c.corpus_id) for c in every]
    for built in builders.values():
        for c in every:
            b = built[c.corpus_id]
            wanted += [(b["greedy"]["final"], c.corpus_id)] + [(x["final"], c.corpus_id) for x in b["samples"]]
    values = iter(probes.utilities(wanted))
    detail: dict[str, Any] = {c.corpus_id: {"flat": {"set": sets[c.corpus_id], "utility": next(values)}}
                              for c in every}
    for name, built in builders.items():
        for c in every:
            b = built[c.corpus_id]
            detail[c.corpus_id][name] = {"set": sets[c.corpus_id], "utility": next(values),
                                         "sampled": [next(values) for _ in b["samples"]],
                                         "same_as_flat": b["greedy"]["final"].key == flat[c.corpus_id].key}
    return detail


def _rows(cfg: Any, s: ExamSession, every: list, builders: dict[str, dict], probes: Any,
          n_boot: int) -> tuple[list[dict], dict[str, list[float]]]:
    """Each builder's greedy stores against the flat store (F1, actions, rho), and per-question utilities."""
    exams: dict[str, list] = {"flat": [], **{name: [] for name in builders}}
    per_question: dict[str, list[float]] = {name: [] for name in exams}
    for c in every:
        stores = {"flat": freeze(Workspace.from_documents(c.docs)),
                  **{name: built[c.corpus_id]["greedy"]["final"] for name, built in builders.items()}}
        for name, data in stores.items():
            results = s.probe(data, c.questions)
            exams[name].extend(results)
            per_question[name].extend(probes.question_utility(r) for r in results)
    rows = [{"name": "flat", **summarize(exams["flat"]), "build_actions": 0.0}]
    for name, built in builders.items():
        row = {"name": name, **compare(exams[name], exams["flat"], n_boot=n_boot, seed=cfg.seed)}
        row["build_actions"] = statistics.fmean(b["greedy"]["actions"] for b in built.values())
        row["construction_tokens"] = sum(b["greedy"]["tokens"] for b in built.values())
        rows.append(row)
    return rows, per_question


def _gathered_means(built: dict[str, Any], support: dict[str, set[str]]) -> dict[str, float | None]:
    """Mean recall and precision of the best synthetic file over a store's builds (greedy and sampled) of the hard
    corpora."""
    pairs = [gathered(x["final"], support[cid]) for cid, b in built.items() if cid in support
             for x in (b["greedy"], *b["samples"])]
    if not pairs:
        return {"recall": None, "precision": None, "builds": 0}
    return {"recall": statistics.fmean(r for r, _ in pairs), "precision": statistics.fmean(p for _, p in pairs),
            "builds": len(pairs)}


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
