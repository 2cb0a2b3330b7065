"""`serve --curate`: answers tagged with their version, the traffic log, feedback, curation in the background.

`OnlineServer` wires the pieces around one build folder: an
`OnlineWorkspace` (the versions, curation rounds, swaps), the `TrafficLog`,
and the `WorkspaceService` the tools read (it follows every swap). A question
is answered on the version current when it arrives (`ask`), tagged with that
version and its snapshot hash, and logged before the answer is returned.
A background thread (`start`) follows HEAD (a `librarian rollback` from
another shell is picked up within a second) and, every `every_s` seconds,
runs a round over the logged questions not yet curated that have feedback,
or a judge's verdict once `feedback_wait_s` passed without any.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from librarian.answering.answer import answer
from librarian.answering.backends import make_reader_backend
from librarian.answering.config import AskConfig, AskItem
from librarian.answering.readers import make_role
from librarian.app.corpus import InputError
from librarian.app.service import NotFound, SaveError, ServiceError, WorkspaceService
from librarian.app.traffic_log import TrafficLog, UnknownRequest
from librarian.app.workspace_dir import OpenedWorkspace, read_manifest
from librarian.models import make_backend
from librarian.online.curation import CurationConfig, Logged, Reasked, Served, held_back
from librarian.online.workspace import OnlineWorkspace, RoundReport, consumed_questions
from librarian.roles.backend_judge import BackendJudge, JudgeItem

log = logging.getLogger("librarian.serve.curate")
ASK_SCHEMA = {"description": "Answer a question with the served reader, on the current version; the result names the "
                             "version and a request_id to send feedback on.",
              "schema": {"type": "object", "properties": {"question": {"type": "string", "minLength": 1}},
                         "required": ["question"], "additionalProperties": False}}
FEEDBACK_SCHEMA = {"description": "Feedback on an answer: its request_id and a gold answer (gold: a list of strings) "
                                  "or a verdict (correct: true or false). The workspace curates itself from it.",
                   "schema": {"type": "object", "properties": {
                       "request_id": {"type": "string", "minLength": 1},
                       "gold": {"type": "array", "items": {"type": "string"}},
                       "correct": {"type": "boolean"}},
                       "required": ["request_id"], "additionalProperties": False}}


@dataclass
class CurateOptions:
    """How `serve --curate` curates (flags of `librarian serve`)."""

    curation: CurationConfig = field(default_factory=CurationConfig)
    every_s: float = 30.0  # a round at most this often
    min_questions: int = 1  # questions ready (feedback or a verdict) for a round to run
    max_questions: int = 50  # a round curates at most this many distinct questions, the oldest first
    feedback_wait_s: float = 300.0  # no feedback after this long: the judge decides (with one)
    judge: str | None = None  # a backend name: it compares the answer with what the reader read
    judge_args: dict[str, Any] = field(default_factory=dict)
    metric: str = "set_f1"  # how an answer is graded against a gold from feedback


def evidence_judge(backend: Any) -> Callable[[Sequence[Logged]], list[bool | None]]:
    """A judge for answers nobody gave feedback on: is the answer what the passages the reader read say?"""
    judge = BackendJudge(backend)

    def verdicts(items: Sequence[Logged]) -> list[bool | None]:
        out: list[bool | None] = [None if i.answer else False for i in items]
        todo = [k for k, i in enumerate(items) if i.answer]
        evidence = ["\n".join(t.observation for t in items[k].trajectory.turns)[-4000:]  # type: ignore[union-attr]
                    if items[k].trajectory is not None else "" for k in todo]
        found = judge.judge_many([JudgeItem(items[k].question, (e or "(nothing was read)",), items[k].answer or "")
                                  for k, e in zip(todo, evidence, strict=True)]) if todo else []
        for k, v in zip(todo, found, strict=True):
            out[k] = v
        return out

    return verdicts


class OnlineServer:
    """One curated build folder served: ask, feedback, and the curation thread."""

    def __init__(self, folder: str | Path, service: WorkspaceService, ask_cfg: AskConfig, opts: CurateOptions,
                 embedder: Any = None, curator: Any = None) -> None:
        self.folder = Path(folder)
        self.service, self.ask_cfg, self.opts = service, ask_cfg, opts
        self.manifest = read_manifest(self.folder)
        self.budget = make_role(ask_cfg.reader, ask_cfg.budget).budget
        self.model = make_reader_backend(ask_cfg)
        self.online = OnlineWorkspace(self.folder, opts.curation, self._reask, curator=curator, embedder=embedder)
        self.traffic = TrafficLog(self.online.store.root, opts.metric)
        self.consumed = consumed_questions(self.online.log)
        self.judge = evidence_judge(make_backend(opts.judge, **opts.judge_args)) if opts.judge else None
        self.online.listeners.append(self._follow)
        self._follow(self.online.current)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----- serving
    def opened(self, served: Served) -> OpenedWorkspace:
        """`served` as `ask` and the tools read it."""
        snap = self.online.store.paths(served.version).snapshot if served.version >= 0 else self.folder / "candidate"
        return OpenedWorkspace(served.workspace, snap, self.folder, served.index, self.manifest, max(served.version, 0))

    def _follow(self, served: Served) -> None:
        self.service.swap(self.opened(served), served.version, served.lock)

    def _answer(self, served: Served, items: list[AskItem]) -> list[dict[str, Any]]:
        with served.lock:  # one reader at a time per version; other versions answer meanwhile
            return answer(self.opened(served), items, self.ask_cfg, backend=self.model, with_trace=True)

    def _reask(self, served: Served, items: Sequence[Logged]) -> list[Reasked]:
        recs = self._answer(served, [AskItem(i.request_id, i.question) for i in items])
        return [Reasked(r["actions"], r["answer"], r["est_tokens_read"]) for r in recs]

    def ask(self, question: str, source: str = "http") -> dict[str, Any]:
        """Answer on the current version, log it (on disk before this returns), tag it with the version."""
        if not question.strip():
            raise ServiceError("the question is empty")
        served = self.online.current  # taken once: a swap during the episode does not touch it
        request_id = uuid.uuid4().hex
        try:
            rec = self._answer(served, [AskItem(request_id, question.strip())])[0]
        except InputError as exc:
            raise ServiceError(str(exc)) from None
        rec.update(request_id=request_id, version=served.version, snapshot_hash=served.snapshot_hash)
        try:
            self.traffic.record_ask(rec, source, self.budget)
        except Exception as exc:  # noqa: BLE001 - an answer that is not in the log is not given
            raise SaveError(f"the answer could not be logged, so it is not returned ({type(exc).__name__}: "
                            f"{exc})") from None
        return rec

    def feedback(self, request_id: str, gold: Sequence[str] | None, correct: bool | None,
                 source: str = "http") -> dict[str, Any]:
        """Log feedback on a logged answer."""
        try:
            feedback_id = self.traffic.record_feedback(request_id, gold, correct, source)
        except UnknownRequest:
            raise NotFound(f"no answer with request_id {request_id[:80]!r} was logged by this workspace") from None
        except ValueError as exc:
            raise ServiceError(str(exc)) from None
        return {"feedback_id": feedback_id, "request_id": request_id}

    def mcp_tools(self) -> dict[str, tuple[dict[str, Any], Any]]:
        """`ask` and `feedback` as MCP tools."""

        def ask_tool(args: dict[str, Any]) -> dict[str, Any]:
            if set(args) - {"question"} or not isinstance(args.get("question"), str):
                raise ServiceError("ask takes one argument: question (a string)")
            rec = self.ask(args["question"], source="mcp")
            keep = ("question", "answer", "files_read", "actions", "est_tokens_read", "version", "snapshot_hash",
                    "request_id")
            text = f"{rec['answer'] if rec['answer'] is not None else '(no answer: ' + rec['end'] + ')'}\n" \
                   f"(version {rec['version']}; request_id {rec['request_id']}: send feedback with it)"
            return {"text": text, **{k: rec.get(k) for k in keep}}

        def feedback_tool(args: dict[str, Any]) -> dict[str, Any]:
            if set(args) - {"request_id", "gold", "correct"} or not isinstance(args.get("request_id"), str):
                raise ServiceError("feedback takes request_id (a string) and gold (a list of strings) or correct")
            gold = args.get("gold")
            if gold is not None and not (isinstance(gold, list) and all(isinstance(g, str) for g in gold)):
                raise ServiceError("gold must be a list of strings")
            if args.get("correct") is not None and not isinstance(args["correct"], bool):
                raise ServiceError("correct must be true or false")
            out = self.feedback(args["request_id"], gold, args.get("correct"), source="mcp")
            return {"text": f"feedback {out['feedback_id']} logged for {out['request_id']}", **out}

        return {"ask": (ASK_SCHEMA, ask_tool), "feedback": (FEEDBACK_SCHEMA, feedback_tool)}

    # ----- curating
    def ready(self, now: float | None = None) -> tuple[list[Logged], list[Logged]]:
        """(questions ready to curate, held-back questions for the check), oldest first."""
        items = self.traffic.logged()
        share = self.opts.curation.holdback
        held = [i for i in items if held_back(i.request_id, share)]
        held = [i for i in held if not i.judged] + [i for i in held if i.judged]  # the check takes the latest judged
        todo = [i for i in items if not held_back(i.request_id, share) and i.request_id not in self.consumed]
        ready = [i for i in todo if i.judged]
        if self.judge is not None:
            now = time.time() if now is None else now
            asked = self.traffic.asked_at()
            aged = [i for i in todo if not i.judged and now - asked.get(i.request_id, now) >= self.opts.feedback_wait_s]
            if aged:
                ready += [replace(i, verdict=v) for i, v in zip(aged, self.judge(aged), strict=True) if v is not None]
        return ready, held

    def curate_once(self, now: float | None = None) -> RoundReport | None:
        """One round if enough questions are ready; None when there were too few."""
        self.online.follow_head()
        self.traffic.compact()
        ready, held = self.ready(now)
        if len(ready) < max(self.opts.min_questions, 1):
            return None
        chosen, covered, seen = [], [], set()
        for item in ready:  # a question asked again and again is curated once a round
            if item.question not in seen:
                if len(chosen) >= self.opts.max_questions:
                    break
                seen.add(item.question)
                chosen.append(item)
            covered.append(item)
        report = self.online.curate(chosen, held)
        if not report.retry:
            self.consumed.update(i.request_id for i in covered)
        print(f"librarian serve: curation round on version {report.base_version}: {report.decision}"
              f"{f' -> version {report.version}' if report.version is not None else ''} ({len(chosen)} question(s), "
              f"{report.ops} ops, {report.wall_s:.1f} s): {report.reason}", file=sys.stderr, flush=True)
        return report

    def _loop(self) -> None:
        due = time.monotonic() + self.opts.every_s
        while not self._stop.wait(min(self.opts.every_s, 1.0)):
            try:
                self.online.follow_head()
                if time.monotonic() >= due:
                    self.curate_once()
                    due = time.monotonic() + self.opts.every_s
            except Exception:  # noqa: BLE001 - the server keeps serving; the round's failure is logged
                log.exception("online curation")

    def start(self) -> None:
        """Curate in a background thread until `stop`."""
        self._thread = threading.Thread(target=self._loop, name="librarian-curate", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
