"""A served workspace that curates itself: the version readers see, curation rounds, swaps and rollbacks.

`OnlineWorkspace.current` is the version being served (a `Served`: its
workspace, index and lock). A reader takes it once and answers on it to the
end, so a swap never changes what a reader in flight sees. `curate` runs a
round (`online.curation`) on a copy of the current version; a candidate that
passes the check is written as a new version (`online.versions`), HEAD moves
to it, and only then does `current` point at it: one assignment, so no reader
ever sees a half-applied version. Every round, swapped or not, is a row of
the curation log (`online/curations/`): its decision and the reason.
A rollback is one path: `rollback_folder` (what `librarian rollback` runs,
from any process) moves HEAD and logs it, and the server's `follow_head`
serves the version HEAD names.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from librarian.online.curation import (
    CurationConfig,
    Logged,
    Reask,
    Reasked,
    Served,
    build_candidate,
    judge_candidate,
    make_curator,
)
from librarian.online.log import PartLog
from librarian.online.versions import VersionStore
from librarian.search.embedded import EmbeddedIndex

log = logging.getLogger("librarian.online")
CURATIONS = "curations"
CURATION_SCHEMA = pa.schema([
    pa.field("round_id", pa.string(), nullable=False),
    pa.field("at", pa.float64(), nullable=False),
    pa.field("decision", pa.string(), nullable=False),  # swapped | refused | unchanged | failed | rollback
    pa.field("reason", pa.string(), nullable=False),
    pa.field("base_version", pa.int64(), nullable=False),
    pa.field("version", pa.int64()),  # the version swapped in (or rolled back to); null when none
    pa.field("questions", pa.list_(pa.string())),
    pa.field("ops", pa.int64()),
    pa.field("curator_actions", pa.int64()),
    pa.field("curator_tokens", pa.int64()),
    pa.field("check_actions", pa.int64()),
    pa.field("wall_s", pa.float64()),
    pa.field("check", pa.string()),  # JSON: the check's figures
    pa.field("retry", pa.bool_()),  # its questions were not used and wait for the next round
], metadata={"librarian.kind": "curations"})


@dataclass
class RoundReport:
    """One curation round (a row of the curation log)."""

    round_id: str
    at: float
    decision: str
    reason: str
    base_version: int
    version: int | None = None
    questions: list[str] = field(default_factory=list)
    ops: int = 0
    curator_actions: int = 0
    curator_tokens: int = 0
    check_actions: int = 0
    wall_s: float = 0.0
    check: dict[str, Any] = field(default_factory=dict)
    retry: bool = False  # the questions were not used (nothing to check on yet, or HEAD moved): curate them again

    @property
    def swapped(self) -> bool:
        return self.decision == "swapped"

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "check": json.dumps(self.check, default=str)}


def load_index(folder: Any, embedder: Any) -> Any:
    """A saved index, loaded fresh (each version and each candidate gets its own object)."""
    return EmbeddedIndex.load(folder, embedder)


class OnlineWorkspace:
    """The versions of one build folder as they are served and curated (see the module docstring)."""

    def __init__(self, folder: Any, cfg: CurationConfig, reask: Reask, curator: Any = None,
                 embedder: Any = None) -> None:
        cfg.check()
        self.cfg = cfg
        self.store = VersionStore(folder)
        self.reask = reask
        self.embedder = embedder
        self.curator = curator if curator is not None else make_curator(cfg)
        self.log = PartLog(self.store.root / CURATIONS, CURATION_SCHEMA, "round_id")
        self._current = self._load(self.store.head())
        self._flat: Served | None = self._current if self._current.version == 0 else None
        self._results: dict[tuple[int, str], Reasked] = {}
        self._round = threading.Lock()
        self.listeners: list[Callable[[Served], None]] = []

    @property
    def current(self) -> Served:
        """The version being served now (take it once per reader)."""
        return self._current

    def _load(self, version: int) -> Served:
        ws = self.store.load(version)
        return Served(version, ws, load_index(self.store.paths(version).index, self.embedder), ws.content_hash())

    def flat(self) -> Served:
        """Version 0, the store as built: what rho is measured against."""
        if self._flat is None:
            self._flat = self._load(0)
        return self._flat

    def _swap(self, served: Served) -> None:
        self._current = served  # one assignment: readers took the old one and keep it
        for listener in self.listeners:
            listener(served)

    def remember(self, version: int, request_id: str, result: Reasked) -> None:
        """A served answer's cost, so the check does not re-ask it on the version it was answered on."""
        self._results[(version, request_id)] = result

    def _results_on(self, served: Served, items: Sequence[Logged]) -> tuple[list[Reasked], int]:
        """Each item's result on `served` (cached, logged, or re-asked); and the actions re-asking cost."""
        out: dict[int, Reasked] = {}
        todo = []
        for i, item in enumerate(items):
            hit = self._results.get((served.version, item.request_id)) if served.version >= 0 else None
            if hit is None and item.version == served.version >= 0:
                hit = Reasked(item.actions, item.answer, item.tokens)
            if hit is None:
                todo.append(i)
            else:
                out[i] = hit
        fresh = self.reask(served, [items[i] for i in todo]) if todo else []
        for i, result in zip(todo, fresh, strict=True):
            out[i] = result
            if served.version >= 0:
                self._results[(served.version, items[i].request_id)] = result
        return [out[i] for i in range(len(items))], sum(r.actions for r in fresh)

    def curate(self, items: Sequence[Logged], held: Sequence[Logged]) -> RoundReport:
        """A round over `items` on a copy of the current version, checked on the latest of `held`."""
        with self._round:
            base = self.current
            report = RoundReport(uuid.uuid4().hex, time.time(), "failed", "", base.version,
                                 questions=[i.request_id for i in items])
            started = time.perf_counter()
            try:
                self._run_round(base, items, held, report)
            except Exception as exc:  # noqa: BLE001 - a failing round is logged and nothing is swapped
                report.decision, report.version = "failed", None
                report.reason = f"the round failed and nothing was swapped in: {type(exc).__name__}: {exc}"
                log.exception("curation round failed")
            report.wall_s = time.perf_counter() - started
            self.log.append([report.row()])
            log.info("curation round on version %d: %s (%s)", base.version, report.decision, report.reason)
            return report

    def _run_round(self, base: Served, items: Sequence[Logged], held: Sequence[Logged], report: RoundReport) -> None:
        if not items:
            report.decision, report.reason = "unchanged", "no logged question to curate"
            return
        paths = self.store.paths(base.version)
        cand = build_candidate(base, items, self.cfg, self.curator, lambda: load_index(paths.index, self.embedder))
        report.ops, report.curator_actions, report.curator_tokens = cand.workspace.version, cand.actions, cand.tokens
        if cand.workspace.version == 0:
            report.decision, report.reason = "unchanged", "the curator made no edits"
            return
        sample = list(held)[-self.cfg.check_questions:]
        served = Served(-1, cand.workspace, cand.index, cand.workspace.content_hash())
        current, cost_a = self._results_on(base, sample)
        flat, cost_b = self._results_on(self.flat(), sample)
        candidate, cost_c = self._results_on(served, sample)
        report.check_actions = cost_a + cost_b + cost_c
        verdict = judge_candidate(sample, current, candidate, flat, self.cfg)
        report.check = {**verdict.figures, "sample": [i.request_id for i in sample]}
        if not verdict.passed:
            report.decision, report.reason = "refused", verdict.reason
            report.retry = len(sample) < max(self.cfg.check_min_questions, 1)
            return
        if self.store.head() != base.version:
            report.decision, report.retry = "refused", True
            report.reason = f"the served version moved to {self.store.head()} during the round (a rollback)"
            return
        number = self.store.commit(cand.workspace, base.version, cand.sync.save,
                                   {"reason": verdict.reason, "questions": report.questions, "check": report.check,
                                    "curator": {"actions": cand.actions, "tokens": cand.tokens}})
        self.store.set_head(number, f"curation round {report.round_id}")
        for item, result in zip(sample, candidate, strict=True):
            self._results[(number, item.request_id)] = result
        self._swap(Served(number, cand.workspace, cand.index, served.snapshot_hash))
        report.decision, report.version, report.reason = "swapped", number, verdict.reason

    def follow_head(self) -> bool:
        """Serve the version HEAD names if another process moved it; True when it did."""
        with self._round:
            head = self.store.head()
            if head == self.current.version:
                return False
            self._swap(self._load(head))
            return True


def record_rollback(curations: PartLog, before: int, version: int, reason: str = "") -> None:
    """A rollback's row in the curation log."""
    curations.append([RoundReport(uuid.uuid4().hex, time.time(), "rollback", reason or f"rollback to {version}",
                                  before, version).row()])


def rollback_folder(folder: Any, version: int, reason: str = "") -> int:
    """Move HEAD of a build folder to `version` (a running `serve --curate` follows it); returns the old HEAD."""
    store = VersionStore(folder)
    before = store.head()
    store.set_head(version, reason or f"rollback to {version}")
    record_rollback(PartLog(store.root / CURATIONS, CURATION_SCHEMA, "round_id"), before, version, reason)
    return before


def consumed_questions(curations: PartLog) -> set[str]:
    """The logged questions earlier rounds used (swapped, refused or not), so a restarted server skips them."""
    return {q for row in curations.rows() if row["decision"] != "rollback" and not row.get("retry")
            for q in row["questions"] or ()}
