"""One answered question as a JSON record: the answer, its score, the files read, their provenance, the costs.

`record` builds it from a trajectory: the files a read/open call showed
(`files_read`), each one's provenance paths back to raw documents, and for
the researcher the passages it found with their file and line
(`passages_of`); `tool_call_failure` marks a model's run with no valid tool
call; `score_record` adds the F1 against the question's golds; `summarise`
gives a batch's means.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from librarian.answering.config import AskItem
from librarian.datasets.scoring import score
from librarian.roles.researcher_tools import JAM_RESEARCHER, finalized
from librarian.workspace.provenance import provenance_paths

READ_TOOLS = frozenset({"read", "open", "browse"})


def files_read(src: Any, traj: Any) -> list[str]:
    """Paths of the nodes whose text a read/open call showed, first-read order."""
    ids = [i for t in traj.turns if any(c["name"] in READ_TOOLS for c in t.calls) for i in t.nodes_touched]
    paths = []
    for node_id in dict.fromkeys(ids):
        node = src.get(node_id)
        if node is not None:
            paths.append(node.path)
    return paths


_SECTION = re.compile(r"^(?P<file>.+)#L(?P<first>\d+)-L\d+$")


def file_of(node: Any) -> str | None:
    """The corpus file a node comes from: a section of a split file names the whole file."""
    if node is None:
        return None
    m = _SECTION.match(node.origin or "") if node.kind == "raw" else None
    return m["file"] if m is not None else node.path


def passages_of(src: Any, context: str, cited: Sequence[str]) -> list[dict[str, Any]]:
    """The researcher's evidence lines (`path: line`) with their place: node path and line, and the file and
    line they come from (a section of a split file points into the whole file)."""
    paths = sorted({p for p in cited if src.by_path(p) is not None}, key=len, reverse=True)
    out: list[dict[str, Any]] = []
    for entry in context.splitlines():
        path = next((p for p in paths if entry.startswith(p + ": ")), None)
        if path is None:
            continue
        node, text = src.by_path(path), entry[len(path) + 2:]
        if node.kind == "synthetic" and node.text.strip() == text.strip():
            continue  # an index file's title ("Ada Lovelace"): its documents are the passages
        lines = node.text.splitlines()
        line = next((i for i, ln in enumerate(lines, start=1) if ln == text), None)
        where, at = file_of(node) or path, line
        m = _SECTION.match(node.origin or "") if node.kind == "raw" else None
        if m is not None and line is not None:
            at = int(m["first"]) + line - 1
        out.append({"path": path, "line": line, "text": text, "file": where, "file_line": at})
    return out


def tool_call_failure(traj: Any) -> str | None:
    """Why a model's run is not an answer: no valid tool call in any turn (only errors), else None."""
    turns = [t for t in traj.turns if not t.forced]
    errors = [e for t in turns for e in t.errors]
    if not turns or any(t.calls for t in turns) or not errors:
        return None
    kinds = sorted({e["message"].split(";")[0][:80] for e in errors})
    return (f"the model made no valid tool call in {len(turns)} turn(s): {len(errors)} tool-call error(s) "
            f"({'; '.join(kinds[:3])}); its answer is not grounded in the workspace")


def score_record(rec: dict[str, Any], item: AskItem) -> None:
    """The record's F1 against the item's gold answers (when it has any)."""
    if item.answers:
        rec["gold"] = list(item.answers)
        try:
            rec["f1"] = score(item.metric, rec["answer"] or "", list(item.answers))
        except ValueError as exc:
            rec["f1"] = None
            rec["score_error"] = str(exc)


def record(item: AskItem, traj: Any, src: Any, with_trace: bool) -> dict[str, Any]:
    """One question's JSON record: answer, score, files read, provenance, costs (and the trace)."""
    read = files_read(src, traj)
    rec: dict[str, Any] = {"id": item.id, "question": item.question, "answer": traj.answer, "end": traj.end,
                           "files_read": read, "nodes_seen": len(traj.nodes_touched), "actions": traj.actions,
                           "est_tokens_read": traj.est_tokens_read}
    if traj.role == JAM_RESEARCHER:  # the answer is the passages found; its sources are raw files
        result = finalized(traj.answer)
        rec["passages"] = passages_of(src, result.context, result.cited)
        rec["searched"] = any(c["name"] == "search" for t in traj.turns for c in t.calls)
        rec["found"] = bool(result.sources) and rec["searched"]  # never an answer without a search
        rec["answer"] = result.context if traj.answer is not None and rec["found"] else None
        rec["sources"] = [n.path if (n := src.get(i)) is not None else i for i in result.sources]
        rec["source_files"] = list(dict.fromkeys(file_of(src.get(i)) or i for i in result.sources))
        rec["cited"], rec["sufficient"] = list(result.cited), result.sufficient
    if (failure := tool_call_failure(traj)) is not None:
        rec["failure"], rec["model_answer"], rec["answer"] = failure, rec["answer"], None
    prov = {}
    for path in read:
        node = src.by_path(path)
        if node is not None and node.kind != "raw":
            prov[path] = provenance_paths(src, node.id, max_paths=3)
    rec["provenance"] = prov
    score_record(rec, item)
    if with_trace:
        rec["trace"] = [{"calls": t.calls, "errors": t.errors, "observation": t.observation} for t in traj.turns]
    return rec


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over a batch: F1 (over questions with golds), files read, actions, tokens read."""
    n = len(records)
    scored = [r["f1"] for r in records if r.get("f1") is not None]
    return {
        "questions": n,
        "scored": len(scored),
        "f1": sum(scored) / len(scored) if scored else None,
        "answered": sum(1 for r in records if r["answer"] is not None),
        "files_read_mean": sum(len(r["files_read"]) for r in records) / n if n else 0.0,
        "nodes_seen_mean": sum(r["nodes_seen"] for r in records) / n if n else 0.0,
        "actions_mean": sum(r["actions"] for r in records) / n if n else 0.0,
        "est_tokens_read_mean": sum(r["est_tokens_read"] for r in records) / n if n else 0.0,
    }
