"""The traffic log of `serve --curate`: every question answered, and the feedback on answers.

Two append-only Parquet logs beside the workspace (`W/online/traffic/asks/`
and `.../feedback/`, see `online.log.PartLog`). `record_ask`
returns only once the row is on disk: concurrent requests are written
together (group commit: whoever finds the queue unwritten writes it all as
one part; the others find theirs done), so an answer a client received is
always in the log, exactly once. A row holds the question, the version it
was answered on and its snapshot hash, the answer, the reader's trajectory
(every call, error and observation), the files read, actions and tokens.
`logged()` joins the asks with their latest feedback as `Logged` items for
the curator.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from librarian.online.curation import Logged, trajectory_of
from librarian.online.log import PartLog

TRAFFIC = "traffic"
ASK_SCHEMA = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("at", pa.float64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),  # http | mcp
    pa.field("version", pa.int64(), nullable=False),
    pa.field("snapshot_hash", pa.string(), nullable=False),
    pa.field("question", pa.string(), nullable=False),
    pa.field("answer", pa.string()),
    pa.field("end", pa.string()),
    pa.field("reader", pa.string()),
    pa.field("budget", pa.int64()),
    pa.field("actions", pa.int64()),
    pa.field("est_tokens_read", pa.int64()),
    pa.field("files_read", pa.list_(pa.string())),
    pa.field("trajectory", pa.string()),  # JSON list of turns: calls, errors, observation
], metadata={"librarian.kind": "traffic.asks"})
FEEDBACK_SCHEMA = pa.schema([
    pa.field("feedback_id", pa.string(), nullable=False),
    pa.field("at", pa.float64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("gold", pa.list_(pa.string())),
    pa.field("correct", pa.bool_()),
], metadata={"librarian.kind": "traffic.feedback"})


class UnknownRequest(KeyError):
    """Feedback for a request id this log never answered."""


class _Pending:
    __slots__ = ("row", "done", "error")

    def __init__(self, row: dict[str, Any]) -> None:
        self.row, self.done, self.error = row, False, None


class GroupCommit:
    """Rows from many threads appended to one `PartLog`; `write` returns once its row is on disk."""

    def __init__(self, log: PartLog) -> None:
        self.log = log
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._flush_lock = threading.Lock()

    def write(self, row: dict[str, Any]) -> None:
        mine = _Pending(row)
        with self._queue_lock:
            self._queue.append(mine)
        with self._flush_lock:  # the first in writes everything queued; the rest find theirs done
            if not mine.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                error = None
                try:
                    self.log.append([p.row for p in batch])
                except Exception as exc:  # noqa: BLE001 - every writer in the batch gets the failure
                    error = exc
                for p in batch:
                    p.done, p.error = True, error
        if mine.error is not None:
            raise mine.error


class TrafficLog:
    """The asks and feedback of one served build folder (`folder/online/traffic`)."""

    def __init__(self, online_root: str | Path, metric: str = "set_f1") -> None:
        root = Path(online_root) / TRAFFIC
        self.asks = PartLog(root / "asks", ASK_SCHEMA, "request_id")
        self.feedback = PartLog(root / "feedback", FEEDBACK_SCHEMA, "feedback_id")
        self.metric = metric
        self._asks = GroupCommit(self.asks)
        self._feedback = GroupCommit(self.feedback)
        self._known: set[str] = set(self.asks.read().column("request_id").to_pylist())
        self._known_lock = threading.Lock()
        self._ask_rows: list[dict[str, Any]] = []  # what `logged` has read so far (the log only grows)
        self._latest: dict[str, dict[str, Any]] = {}
        self._items: list[Logged] = []

    def record_ask(self, rec: dict[str, Any], source: str, budget: int | None = None) -> None:
        """Log one answered question (`rec`: an `ask` record with its trace, `request_id`, `version`,
        `snapshot_hash`); returns once it is on disk."""
        turns = [{"calls": t.get("calls", []), "errors": t.get("errors", []), "observation": t.get("observation", "")}
                 for t in rec.get("trace", [])]
        self._asks.write({
            "request_id": rec["request_id"], "at": time.time(), "source": source, "version": rec["version"],
            "snapshot_hash": rec["snapshot_hash"], "question": rec["question"], "answer": rec.get("answer"),
            "end": rec.get("end"), "reader": rec.get("reader"), "budget": budget, "actions": rec.get("actions", 0),
            "est_tokens_read": rec.get("est_tokens_read", 0), "files_read": list(rec.get("files_read", [])),
            "trajectory": json.dumps(turns, ensure_ascii=False, default=str)})
        with self._known_lock:
            self._known.add(rec["request_id"])

    def knows(self, request_id: str) -> bool:
        with self._known_lock:
            return request_id in self._known

    def record_feedback(self, request_id: str, gold: Sequence[str] | None, correct: bool | None,
                        source: str) -> str:
        """Log feedback on an answer; returns its id. Raises `UnknownRequest` for an id never answered here,
        `ValueError` when neither a gold nor a verdict is given."""
        if not self.knows(request_id):
            raise UnknownRequest(request_id)
        golds = [g for g in (gold or []) if g.strip()]
        if not golds and correct is None:
            raise ValueError("feedback needs a gold answer (`gold`) or a verdict (`correct`: true or false)")
        feedback_id = uuid.uuid4().hex
        self._feedback.write({"feedback_id": feedback_id, "at": time.time(), "source": source,
                              "request_id": request_id, "gold": golds or None, "correct": correct})
        return feedback_id

    def logged(self) -> list[Logged]:
        """Every logged question, oldest first, with its latest feedback (a gold, a verdict, both or none)."""
        for row in sorted(self.feedback.read_new(), key=lambda r: r["at"]):
            if row["at"] >= self._latest.get(row["request_id"], {}).get("at", float("-inf")):
                self._latest[row["request_id"]] = row
        for row in self.asks.read_new():
            self._ask_rows.append(row)
            traj = trajectory_of(json.loads(row["trajectory"] or "[]"), row["reader"] or "reader",
                                 f"Question: {row['question']}", row["budget"] or 0, row["answer"],
                                 row["end"] or "answer", row["actions"] or 0)
            self._items.append(Logged(row["request_id"], row["question"], row["version"], row["answer"],
                                      row["actions"] or 0, row["est_tokens_read"] or 0, traj, metric=self.metric))
        out = []
        for item in self._items:
            fb = self._latest.get(item.request_id)
            out.append(item if fb is None else replace(item, gold=tuple(fb["gold"] or ()), verdict=fb["correct"]))
        return out

    def asked_at(self) -> dict[str, float]:
        """When each logged question `logged` returned was answered (seconds since the epoch)."""
        return {row["request_id"]: row["at"] for row in self._ask_rows}

    def compact(self, min_parts: int = 64) -> None:
        """Merge small parts (a long-running server writes one per batch of requests)."""
        self.asks.compact(min_parts)
        self.feedback.compact(min_parts)
