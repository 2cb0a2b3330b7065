"""`librarian ask`'s human-readable answer blocks: the answer (or plainly why there is none), the passages the
researcher found, the files read with their provenance, the sources, and with `--trace` every tool call.
Control characters in stored text are shown escaped, never run."""

from __future__ import annotations

import json
import sys
from typing import Any

from librarian.workspace.text import terminal_safe

MAX_SHOWN_PASSAGES = 20


def answer_text(rec: dict[str, Any]) -> str:
    """The `A:` line: the answer, what the researcher found, or plainly why there is none."""
    if rec.get("failure"):
        return f"(no answer: {rec['failure']})"
    if "passages" not in rec:
        return rec["answer"] if rec["answer"] is not None else f"(no answer: {rec['end']})"
    if not rec.get("searched"):
        return "(no answer: the reader finished without searching the workspace)"
    if not rec.get("found"):
        return (f"nothing found: no passage in the workspace answers this ({rec['actions']} actions, "
                f"{len(rec['files_read'])} files read)")
    if rec.get("answered_by") or not rec["passages"]:
        return rec["answer"]
    files = len({p["file"] for p in rec["passages"]})
    return (f"{len(rec['passages'])} passage(s) from {files} file(s) (--backend openai or hf writes an answer "
            "from them):")


def print_record(rec: dict[str, Any], with_trace: bool, stream: Any = None) -> None:
    """The human-readable answer block (control characters in stored text are shown escaped, never run)."""
    out = stream or sys.stdout

    def w(text: str) -> None:
        out.write(terminal_safe(text))
    w(f"Q: {rec['question']}\nA: {answer_text(rec)}")
    if "f1" in rec and rec["f1"] is not None:
        w(f"   (gold: {', '.join(rec['gold'])}; F1 {rec['f1']:.2f})")
    shown = rec.get("passages", [])[:MAX_SHOWN_PASSAGES] if rec.get("found") else []
    for p in shown:
        w(f"\n  {p['file']}:{p['file_line'] or '?'}: {p['text'].strip()}")
    if len(rec.get("passages", [])) > len(shown) and shown:
        w(f"\n  ... and {len(rec['passages']) - len(shown)} more (all in --jsonl)")
    w(f"\nfiles read ({len(rec['files_read'])}, {rec['actions']} actions):\n")
    for path in rec["files_read"]:
        w(f"  {path}\n")
        for chain in rec["provenance"].get(path, []):
            w(f"    provenance: {' -> '.join(chain)}\n")
    if "sources" in rec:
        w(f"sources ({'sufficient' if rec['sufficient'] else 'not judged sufficient'}): "
          f"{', '.join(rec.get('source_files') or rec['sources']) or 'none'}\n")
    if with_trace:
        w("trace:\n")
        for i, turn in enumerate(rec.get("trace", []), start=1):
            for call in turn["calls"]:
                w(f"  {i}. {call['name']}({json.dumps(call['arguments'], ensure_ascii=False)})\n")
            for err in turn["errors"]:
                w(f"  {i}. error ({err['kind']}): {err['message']}\n")
            seen = turn["observation"].replace("\n", " | ")
            w(f"     -> {seen[:300]}{'...' if len(seen) > 300 else ''}\n")
    w("\n")
