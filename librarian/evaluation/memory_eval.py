"""Evaluating a JAM researcher (paper 002) on memory tasks, with the paper's ablations as arms.

Arms (Table 4 of paper 002):

- `hierarchical`: the full system: memorized workspace, researcher, hybrid search;
- `flat`: no memorizer: the researcher over the raw sessions only;
- `no_researcher`: one-shot retrieval (top-k hits of one hybrid search) on the hierarchical store;
- `no_bm25`: the researcher on the hierarchical store with dense-only search;
- `no_dense`: the researcher on the hierarchical store with BM25-only search.

Per arm: source recall (mean and bootstrap 95% CI), source precision, the
share of questions whose context holds a gold answer (the CPU proxy of the
client's accuracy; with a `client` backend also the official metric of the
client's answer), rounds, budget exhaustion, query latency and construction
time. Questions without gold sessions (abstention questions) are skipped
and counted. Any `PolicyBackend` can be the researcher.

Latency is comparable across arms: every arm first researches `warmup`
questions untimed (what a first call loads is paid there), then the arms
take turns batch by batch in a rotating order (`arm_order`), each batch
with a cold query cache. `differences` holds every arm minus the full
system, question by question, with paired bootstrap CIs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import mean, median
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from librarian.datasets.records import Question
from librarian.datasets.scoring import score
from librarian.evaluation.memory_arms import build_store, one_shot
from librarian.evaluation.memory_tasks import MemoryTask
from librarian.evaluation.metrics.bootstrap import bootstrap_ci, paired_bootstrap_ci
from librarian.models.base import PolicyBackend, SamplingParams
from librarian.rewards.source_recall import source_precision, source_recall
from librarian.roles.definitions import jam_researcher
from librarian.roles.episode import LoopConfig
from librarian.roles.memorizer import MemoFn
from librarian.roles.research_context import INDEX_S, research_context, with_mode
from librarian.roles.researcher import research
from librarian.roles.researcher_tools import Finalized
from librarian.roles.tools import ToolContext

ARMS: tuple[str, ...] = ("hierarchical", "flat", "no_researcher", "no_bm25", "no_dense")
_STORE = {"hierarchical": "hierarchical", "flat": "flat", "no_researcher": "hierarchical",
          "no_bm25": "hierarchical", "no_dense": "hierarchical"}
_MODE = {"hierarchical": "hybrid", "flat": "hybrid", "no_researcher": "hybrid", "no_bm25": "dense",
         "no_dense": "bm25"}
CLIENT_PROMPT = ("Answer the question using only the context. Reply with the answer alone, as few words as "
                 "possible.\n\nContext:\n{context}\n\nQuestion: {question}")


@dataclass
class ArmsSettings:
    """Which arms, the researcher's budget and sampling, the embedder, and the bootstrap: the fields alone, as a
    pipeline's `eval` section extends them; `ResearcherEvalConfig` checks them."""

    arms: tuple[str, ...] = ARMS
    budget: int = 20
    max_calls_per_turn: int = 4
    embedder: str = "minilm"
    one_shot_k: int = 5
    n_boot: int = 2000
    seed: int = 0
    max_new_tokens: int = 512
    temperature: float = 0.0
    batch_size: int = 1  # questions researched together (latency: each episode's wall time in its batch)
    warmup: int = 1  # questions each arm researches untimed before the timed run (0: none)
    client_max_new_tokens: int = 32  # the client model's answer from an arm's context


@dataclass
class ResearcherEvalConfig(ArmsSettings):
    """`ArmsSettings`, checked when made (a bad value raises `ValueError` naming the field)."""

    def __post_init__(self) -> None:
        arms = self.arms = tuple(self.arms)
        bad = [a for a in arms if a not in ARMS]
        if bad or not arms:
            raise ValueError(f"unknown arm(s) {', '.join(bad) or '(none given)'}; valid arms: {', '.join(ARMS)}")
        for name in ("budget", "max_calls_per_turn", "one_shot_k", "n_boot", "max_new_tokens", "batch_size",
                     "client_max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ResearcherEvalConfig.{name} must be a positive integer, got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"ResearcherEvalConfig.warmup must be an integer >= 0, got {self.warmup!r}")
        if self.embedder not in ("minilm", "hashing"):
            raise ValueError(f"ResearcherEvalConfig.embedder must be 'minilm' or 'hashing', got {self.embedder!r}")


@dataclass(frozen=True, slots=True)
class _Row:
    task: str
    question: str
    arm: str
    recall: float
    precision: float
    rounds: int
    exhausted: bool
    latency_s: float
    answer_in_context: bool
    client_score: float | None = None


def answer_in_context(context: str, answers: Sequence[str]) -> bool:
    """Whether any gold answer string occurs in the context (case-insensitive)."""
    low = context.lower()
    return any(a.strip() and a.strip().lower() in low for a in answers)


def arm_contexts(task: MemoryTask, arms: Sequence[str], cfg: ResearcherEvalConfig,
              memo_fn: MemoFn | None) -> tuple[dict[str, ToolContext], dict[str, float]]:
    """Each arm's tool context, and its construction seconds (store build + index build)."""
    built: dict[str, tuple[ToolContext, float]] = {}
    for kind in dict.fromkeys(_STORE[a] for a in arms):
        store = build_store(task.sessions, kind, memo_fn)  # type: ignore[arg-type]
        ctx = research_context(store.workspace, "hybrid", cfg.embedder)
        built[kind] = (ctx, store.build_s + ctx.extra[INDEX_S])
    ctxs = {a: with_mode(built[_STORE[a]][0], _MODE[a]) for a in arms}
    return ctxs, {a: built[_STORE[a]][1] for a in arms}


def _research_batch(arm: str, qs: Sequence[Question], ctx: ToolContext, backend: PolicyBackend,
                    cfg: ResearcherEvalConfig) -> list[tuple[Finalized, int, bool, float]]:
    """One arm on one batch of questions: (result, rounds, budget exhausted, latency s) per question. The
    arms share an index, so each batch starts with its query-embedding cache cleared: every arm runs cold."""
    if not qs:
        return []
    clear = getattr(ctx.index, "clear_query_cache", None)
    if clear is not None:
        clear()
    if arm == "no_researcher":
        out = []
        for q in qs:
            t0 = time.perf_counter()
            result = one_shot(ctx, q.question, cfg.one_shot_k)
            out.append((result, 0, False, time.perf_counter() - t0))
        return out
    role = jam_researcher(budget=cfg.budget, max_calls_per_turn=cfg.max_calls_per_turn)
    loop = LoopConfig(params=SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                            seed=cfg.seed))
    runs = research([ctx] * len(qs), [q.question for q in qs], backend, role, loop)
    return [(r.result, r.rounds, any(t.forced for t in r.trajectory.turns), r.trajectory.wall_s) for r in runs]


def arm_order(arms: Sequence[str], batch: int) -> list[str]:
    """The arms in the order batch number `batch` runs them: rotated by one each batch, so every arm runs
    first, second, ... equally often and none is always timed first (cold) or last."""
    k = batch % len(arms)
    return [*arms[k:], *arms[:k]]


def _research_arms(qs: list[Question], ctxs: dict[str, ToolContext], backend: PolicyBackend,
                   cfg: ResearcherEvalConfig, bar) -> dict[str, list[tuple[Finalized, int, bool, float]]]:
    """Every arm on every question, batch by batch in `arm_order`, after `cfg.warmup` untimed questions per arm."""
    for arm in cfg.arms:  # loads what a first call loads (model kernels, caches), so no arm's latency pays for it
        _research_batch(arm, qs[:cfg.warmup], ctxs[arm], backend, cfg)
    done: dict[str, list[tuple[Finalized, int, bool, float]]] = {a: [] for a in cfg.arms}
    for b, start in enumerate(range(0, len(qs), cfg.batch_size)):
        batch = qs[start:start + cfg.batch_size]
        for arm in arm_order(cfg.arms, b):
            bar.set_postfix_str(arm)
            done[arm] += _research_batch(arm, batch, ctxs[arm], backend, cfg)
            bar.update(len(batch))
    return done


def _client_scores(client: PolicyBackend, qs: list[Question], results: list[Finalized],
                   cfg: ResearcherEvalConfig) -> list[float]:
    """The official metric of the client's answer from each context ('judge' questions fall back to SQuAD F1)."""
    prompts = [[{"role": "user", "content": CLIENT_PROMPT.format(context=r.context or "(empty)",
                                                                   question=q.question)}]
               for q, r in zip(qs, results, strict=True)]
    samples = client.generate(prompts, None, SamplingParams(max_new_tokens=cfg.client_max_new_tokens,
                                                            temperature=0.0))
    scores = []
    for q, (s, *_) in zip(qs, samples, strict=True):
        metric = "squad_f1" if q.metric == "judge" else q.metric
        cat = int(q.extra["category"]) if "category" in q.extra else None
        scores.append(score(metric, s.text.strip(), q.answers, cat))
    return scores


def _summary(rows: list[_Row], construction_s: float, cfg: ResearcherEvalConfig) -> dict[str, Any]:
    recalls = [r.recall for r in rows]
    ci = bootstrap_ci(recalls, n_boot=cfg.n_boot, seed=cfg.seed)
    lat = np.asarray([r.latency_s for r in rows])
    rounds = [r.rounds for r in rows]
    out = {
        "n": len(rows), "source_recall": mean(recalls), "source_recall_ci": [ci.low, ci.high],
        "source_precision": mean(r.precision for r in rows),
        "answer_in_context": mean(float(r.answer_in_context) for r in rows),
        "rounds_mean": float(mean(rounds)), "rounds_median": float(median(rounds)),
        "budget_exhausted": mean(float(r.exhausted) for r in rows),
        "query_latency_s_p50": float(np.percentile(lat, 50)), "query_latency_s_p95": float(np.percentile(lat, 95)),
        "construction_s": construction_s,
    }
    if rows[0].client_score is not None:
        out["client_score"] = mean(r.client_score or 0.0 for r in rows)
    return out


def arm_differences(rows: Sequence[_Row], cfg: ResearcherEvalConfig) -> dict[str, dict[str, Any]]:
    """Each other arm minus the full system (hierarchical), question by question: source recall and latency (s),
    with paired bootstrap 95% CIs."""
    base = [r for r in rows if r.arm == "hierarchical"]
    out = {}
    for arm in cfg.arms:
        if arm == "hierarchical":
            continue
        mine = [r for r in rows if r.arm == arm]
        out[arm] = {}
        for key, field in (("source_recall", "recall"), ("latency_s", "latency_s")):
            ci = paired_bootstrap_ci([getattr(r, field) for r in mine], [getattr(r, field) for r in base],
                                     n_boot=cfg.n_boot, seed=cfg.seed)
            out[arm].update({key: ci.point, f"{key}_ci": ci.as_list()})
    return out


def evaluate_researcher(tasks: Sequence[MemoryTask], backend: PolicyBackend, cfg: ResearcherEvalConfig | None = None,
                        progress: bool = True, client: PolicyBackend | None = None,
                        memo_fn: MemoFn | None = None) -> dict[str, Any]:
    """Every arm of `cfg` on every task's questions with gold sessions; see the module docstring for the fields."""
    cfg = cfg or ResearcherEvalConfig()
    if not tasks:
        raise ValueError("evaluate_researcher needs at least one task")
    asked = {t.name: [q for q in t.questions if q.support] for t in tasks}
    total = sum(len(v) for v in asked.values())
    if total == 0:
        raise ValueError("no question of these tasks has gold support sessions; source recall needs them")
    rows: list[_Row] = []
    construction = dict.fromkeys(cfg.arms, 0.0)
    bar = tqdm(total=total * len(cfg.arms), desc="researcher eval", unit="q", disable=not progress)
    try:
        for task in tasks:
            qs = asked[task.name]
            if not qs:
                continue
            ctxs, built_s = arm_contexts(task, cfg.arms, cfg, memo_fn)
            answered = _research_arms(qs, ctxs, backend, cfg, bar)
            for arm in cfg.arms:
                construction[arm] += built_s[arm]
                done = answered[arm]
                client_s = (_client_scores(client, qs, [d[0] for d in done], cfg) if client is not None
                            else [None] * len(qs))
                for q, (res, rounds, forced, lat), cs in zip(qs, done, client_s, strict=True):
                    rows.append(_Row(task.name, q.id, arm, source_recall(res.sources, q.support),
                                     source_precision(res.sources, q.support), rounds, forced, lat,
                                     answer_in_context(res.context, q.answers), cs))
    finally:
        bar.close()
    result: dict[str, Any] = {
        "arms": {a: _summary([r for r in rows if r.arm == a], construction[a], cfg) for a in cfg.arms},
        "tasks": [t.name for t in tasks], "n_questions": total,
        "skipped_no_support": sum(len(t.questions) for t in tasks) - total,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
    }
    if "hierarchical" in cfg.arms:
        result["differences"] = arm_differences(rows, cfg)
    if "hierarchical" in cfg.arms and "flat" in cfg.arms:
        hier = [r.recall for r in rows if r.arm == "hierarchical"]
        flat = [r.recall for r in rows if r.arm == "flat"]
        diff = paired_bootstrap_ci(hier, flat, n_boot=cfg.n_boot, seed=cfg.seed)
        result["hierarchical_minus_flat"] = diff.point
        result["hierarchical_minus_flat_ci"] = [diff.low, diff.high]
        flat_lat = result["arms"]["flat"]["query_latency_s_p50"]
        if flat_lat > 0:
            result["latency_ratio_hierarchical_over_flat"] = result["arms"]["hierarchical"]["query_latency_s_p50"] / flat_lat
    result["per_question"] = [asdict(r) for r in rows]
    return result
