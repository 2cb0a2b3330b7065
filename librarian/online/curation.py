"""One online curation round: backward passes over logged questions on a copy, then the flat-store check.

A round starts from the version being served. Its workspace is copied
(copy-on-write: nodes are shared, only the indexes are duplicated) and its
search index reloaded, so readers keep answering on the served version while
the curator edits the copy. The curator is the KBGym curator (one backward
pass per logged question: the question, the reader's own trajectory, the
gold or verdict that came back, its F1, the uniform instruction) or the
Librarian builder (one episode per round over the workspace, told the
questions), through any backend.

The check re-asks a held-back sample of logged questions (never curated) on
the candidate and compares it with the served version on the same questions,
and both with version 0 (the store as built: the flat store when built flat):
a candidate that costs more actions than the served version (beyond
`action_tolerance`) or loses F1 beyond `f1_tolerance` is refused, with the
figures that say why.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from librarian.config import ConfigError
from librarian.datasets.scoring import score
from librarian.online.policy import PolicyConfig, loop_config, make_policy
from librarian.roles import ToolContext, ToolEnv, kbgym_curator, librarian_builder, run_episode
from librarian.roles.builder_task import build_task
from librarian.roles.kbgym_passes import backward_task, curation_task
from librarian.roles.trajectory import Trajectory, TurnRecord
from librarian.search.sync import IndexSync
from librarian.workspace import NearDuplicateGuard, Workspace

ROLES = ("kbgym_curator", "librarian_builder")


@dataclass
class CurationConfig:
    """How a served workspace curates itself (`curation.*` in evaluate_online; `serve --curate` flags)."""

    role: str = "kbgym_curator"  # kbgym_curator (a backward pass per question) | librarian_builder (an episode a round)
    curator: PolicyConfig = field(default_factory=PolicyConfig)  # scripted: the role's scripted policy unless named
    backward_budget: int = 30  # the curator's actions per question (per round for the builder)
    curator_memory: int = -1  # -1: full history
    dedup_threshold: float = 0.9  # near-duplicate guard on add / edit (0: off)
    search_mode: str = "bm25"
    holdback: float = 0.2  # share of logged questions held back for the check, never curated
    check_questions: int = 20  # the most recent held-back questions re-asked on a candidate
    check_min_questions: int = 5  # fewer held back so far: the candidate is refused (nothing to check it on)
    f1_tolerance: float = 0.03  # refuse a candidate whose F1 on the sample falls more than this
    action_tolerance: float = 0.0  # refuse a candidate costing more than (1 + this) x the served version's actions

    def check(self) -> None:
        if self.role not in ROLES:
            raise ConfigError(f"curation.role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if not 0.0 <= self.holdback < 1.0:
            raise ConfigError(f"curation.holdback must be in [0, 1), got {self.holdback}")
        for name in ("backward_budget", "check_questions"):
            if getattr(self, name) < 1:
                raise ConfigError(f"curation.{name} must be >= 1, got {getattr(self, name)}")
        if self.check_min_questions < 0 or self.check_min_questions > self.check_questions:
            raise ConfigError(f"curation.check_min_questions must be in [0, check_questions], "
                              f"got {self.check_min_questions}")
        if self.f1_tolerance < 0 or self.action_tolerance < 0:
            raise ConfigError("curation.f1_tolerance and curation.action_tolerance must be >= 0")
        if self.curator.backend == "reader":
            raise ConfigError("curation.curator.backend cannot be 'reader' online; name a backend (scripted, hf, openai)")


@dataclass(frozen=True)
class Served:
    """One version as readers see it: the workspace (never edited once served), its index, and a lock."""

    version: int
    workspace: Workspace
    index: Any
    snapshot_hash: str
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)


@dataclass(frozen=True)
class Logged:
    """A question the served reader answered, and what came back about it (a gold, or a verdict)."""

    request_id: str
    question: str
    version: int
    answer: str | None
    actions: int
    tokens: int = 0
    trajectory: Trajectory | None = None
    gold: tuple[str, ...] = ()
    verdict: bool | None = None  # correct / incorrect, from feedback or a judge
    metric: str = "set_f1"

    @property
    def judged(self) -> bool:
        """Whether anything came back: a gold or a verdict."""
        return bool(self.gold) or self.verdict is not None

    def reference(self) -> tuple[str, ...]:
        """What an answer is graded against: the gold, else the answer itself when it was judged correct."""
        if self.gold:
            return self.gold
        return (self.answer,) if self.verdict and self.answer else ()

    def f1(self, answer: str | None = None) -> float | None:
        """F1 of `answer` (default: the logged one) against the reference; None when there is none."""
        ref = self.reference()
        if ref:
            return score(self.metric, (self.answer if answer is None else answer) or "", list(ref))
        return 0.0 if self.verdict is False and answer is None else None


@dataclass(frozen=True, slots=True)
class Reasked:
    """A question re-asked on one version: its cost and answer."""

    actions: int
    answer: str | None
    tokens: int = 0


Reask = Callable[[Served, Sequence[Logged]], list[Reasked]]


def held_back(request_id: str, share: float) -> bool:
    """Whether a logged question is kept for the check (a stable hash of its id: the same in every process)."""
    digest = hashlib.sha256(request_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < share


def trajectory_of(turns: Sequence[dict[str, Any]], role: str, task: str, budget: int, answer: str | None,
                  end: str, actions: int) -> Trajectory:
    """A reader's trajectory rebuilt from a log (calls, errors, observations; `actions` in all)."""
    records = [TurnRecord(index=i, text="", calls=list(t.get("calls", [])), errors=list(t.get("errors", [])),
                          observation=str(t.get("observation", "")), actions=max(1, len(t.get("calls", []))))
               for i, t in enumerate(turns)]
    spent = sum(r.actions for r in records)
    if records and spent != actions:  # keep the logged total exact
        records[-1].actions = max(0, records[-1].actions + actions - spent)
    return Trajectory(role, task, budget, records, answer=answer, end=end)  # type: ignore[arg-type]


@dataclass
class Candidate:
    """What a round produced: the edited copy, its index (in step with it) and the curator's cost."""

    workspace: Workspace
    index: Any
    sync: Any
    trajectories: list[Trajectory]
    actions: int
    tokens: int
    wall_s: float


def make_curator(cfg: CurationConfig) -> Any:
    """The curator's backend (a scripted one plays the role's scripted policy unless it names another)."""
    return make_policy(cfg.curator, "kbgym_curator" if cfg.role == "kbgym_curator" else "librarian_builder")


def build_candidate(base: Served, items: Sequence[Logged], cfg: CurationConfig, curator: Any,
                    load_index: Callable[[], Any]) -> Candidate:
    """Curate a copy of `base` over `items`; `load_index()` gives a fresh copy of `base`'s index."""
    started = time.perf_counter()
    ws = base.workspace.copy()  # its trace starts empty: the ops of this round
    ws.guard = NearDuplicateGuard(threshold=cfg.dedup_threshold) if cfg.dedup_threshold > 0 else None
    index = load_index()
    sync = IndexSync(index, ws, 0)
    ctx = ToolContext(ws, index, sync, search_mode=cfg.search_mode)
    memory = None if cfg.curator_memory < 0 else cfg.curator_memory
    loop = loop_config(cfg.curator)
    trajs: list[Trajectory] = []
    if cfg.role == "kbgym_curator":
        role = kbgym_curator(budget=cfg.backward_budget, memory_window=memory)
        for item in items:
            if item.trajectory is not None:
                f1 = item.f1()
                task = backward_task(item.question, item.trajectory, list(item.reference()) or ["(unknown)"],
                                     0.0 if f1 is None else f1)
            else:
                task = curation_task(item.question)
            trajs.append(run_episode(ToolEnv(role, ctx, task), curator, role, loop))
    else:
        role = librarian_builder(budget=cfg.backward_budget, memory_window=memory)
        asked = "\n".join(f"- {item.question}" for item in items)
        task = build_task(ws) + f"\n\nQuestions readers asked (organise for questions like these):\n{asked}"
        trajs.append(run_episode(ToolEnv(role, ctx, task), curator, role, loop))
    sync.end_iteration()
    tokens = sum(len(t.response_ids) for tr in trajs for t in tr.turns)
    return Candidate(ws, index, sync, trajs, sum(t.actions for t in trajs), tokens, time.perf_counter() - started)


@dataclass(frozen=True)
class CheckResult:
    """The flat-store check's verdict on a candidate, and its figures."""

    passed: bool
    reason: str
    figures: dict[str, Any]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def judge_candidate(sample: Sequence[Logged], current: Sequence[Reasked], candidate: Sequence[Reasked],
                    flat: Sequence[Reasked], cfg: CurationConfig) -> CheckResult:
    """Compare the candidate with the served version (and both with version 0) on the held-back sample."""
    n = len(sample)
    if n < max(cfg.check_min_questions, 1):
        return CheckResult(False, f"only {n} held-back question(s) to check the candidate on "
                                  f"(check_min_questions is {cfg.check_min_questions})", {"n": n})
    acts = {name: sum(r.actions for r in rs) for name, rs in
            (("current", current), ("candidate", candidate), ("flat", flat))}
    scored = [i for i, item in enumerate(sample) if item.reference()]
    f1 = {name: _mean([sample[i].f1(rs[i].answer or "") or 0.0 for i in scored]) for name, rs in
          (("current", current), ("candidate", candidate), ("flat", flat))}
    figures = {"n": n, "scored": len(scored),
               **{f"actions_{k}": v / n for k, v in acts.items()},
               **{f"f1_{k}": v for k, v in f1.items()},
               "rho_current": acts["current"] / acts["flat"] if acts["flat"] else None,
               "rho_candidate": acts["candidate"] / acts["flat"] if acts["flat"] else None}
    if acts["candidate"] > acts["current"] * (1.0 + cfg.action_tolerance):
        return CheckResult(False, f"the held-back sample costs more actions on the candidate: "
                                  f"{acts['current'] / n:.2f} -> {acts['candidate'] / n:.2f} per question "
                                  f"(rho vs version 0 {_fmt(figures['rho_current'])} -> "
                                  f"{_fmt(figures['rho_candidate'])}; action_tolerance {cfg.action_tolerance})",
                           figures)
    if scored and f1["candidate"] < f1["current"] - cfg.f1_tolerance:  # type: ignore[operator]
        return CheckResult(False, f"F1 on the held-back sample falls on the candidate: {f1['current']:.3f} -> "
                                  f"{f1['candidate']:.3f} (f1_tolerance {cfg.f1_tolerance})", figures)
    note = "" if scored else " (no gold or verdict in the sample: actions only)"
    return CheckResult(True, f"actions {acts['current'] / n:.2f} -> {acts['candidate'] / n:.2f} per question, F1 "
                             f"{_fmt(f1['current'])} -> {_fmt(f1['candidate'])} on {n} held-back question(s){note}",
                       figures)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
