"""Compactors: summarise the old turns of a long history into one message (the episode loop's hook).

A compactor is `(history) -> history` (`episode.Compactor`); `history` is
the flattened action-result pairs (assistant, tool, assistant, tool...)
after the opening. Both compactors keep the last `keep_pairs` pairs as they
are and replace everything before them (an earlier summary included) with
one user message that starts with `SUMMARY_HEAD`:

- `ExtractiveCompactor`: one line per old turn (the calls it made and the
  first lines of what came back), bounded to `max_chars`, newest kept first
  when the bound bites.
- `LLMCompactor`: asks any `PolicyBackend` to summarise the old turns; an
  empty reply falls back to the extractive summary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from librarian.models.base import Message, PolicyBackend, SamplingParams

SUMMARY_HEAD = "Summary of earlier turns (compacted):"
_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*(?:</tool_call>|$)", re.S)


def _split(history: Sequence[Message], keep_pairs: int) -> tuple[list[Message], list[Message]]:
    if keep_pairs < 0:
        raise ValueError(f"keep_pairs must be >= 0, got {keep_pairs}")
    cut = max(0, len(history) - 2 * keep_pairs)
    return list(history[:cut]), list(history[cut:])


def _flat(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def turn_lines(old: Sequence[Message], obs_chars: int = 160) -> list[str]:
    """One line per old message pair: an earlier summary's lines as they are, else `did: <calls> -> <result>`."""
    lines: list[str] = []
    i = 0
    while i < len(old):
        msg = old[i]
        if msg["content"].startswith(SUMMARY_HEAD):
            lines.extend(ln for ln in msg["content"].splitlines()[1:] if ln.strip())
            i += 1
            continue
        calls = [_flat(c, 120) for c in _CALL.findall(msg["content"])] if msg["role"] == "assistant" else []
        said = "; ".join(calls) if calls else _flat(msg["content"], 120)
        paired = i + 1 < len(old) and old[i + 1]["role"] != "assistant"
        result = old[i + 1]["content"] if paired else ""
        lines.append(f"- did: {said} -> {_flat(result, obs_chars)}")
        i += 2 if paired else 1
    return lines


def _summary(lines: Sequence[str], max_chars: int) -> str:
    kept: list[str] = []
    used = len(SUMMARY_HEAD)
    for line in reversed(lines):  # the newest turns matter most
        if used + len(line) + 1 > max_chars:
            kept.append(f"- ({len(lines) - len(kept)} earlier turn(s) dropped)")
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join([SUMMARY_HEAD, *reversed(kept)])


@dataclass(frozen=True, slots=True)
class ExtractiveCompactor:
    """Old turns -> one bounded summary message of the calls made and their results."""

    keep_pairs: int = 2
    max_chars: int = 2000
    obs_chars: int = 160

    def __call__(self, history: list[Message]) -> list[Message]:
        old, recent = _split(history, self.keep_pairs)
        if not old:
            return list(history)
        text = _summary(turn_lines(old, self.obs_chars), self.max_chars)
        return [{"role": "user", "content": text}, *recent]


COMPACT_PROMPT = (
    "Summarise these earlier turns of an agent's work for the agent itself. Keep every fact found, every path "
    "or id that held something useful, and what is still missing. At most {max_chars} characters.\n\n{turns}"
)


@dataclass
class LLMCompactor:
    """Old turns summarised by a backend (the extractive summary when the reply is empty)."""

    backend: PolicyBackend
    keep_pairs: int = 2
    max_chars: int = 2000
    params: SamplingParams = SamplingParams(max_new_tokens=400, temperature=0.0)

    def __call__(self, history: list[Message]) -> list[Message]:
        old, recent = _split(history, self.keep_pairs)
        if not old:
            return list(history)
        lines = turn_lines(old, 600)
        prompt = COMPACT_PROMPT.format(max_chars=self.max_chars, turns="\n".join(lines))
        reply = self.backend.generate([[{"role": "user", "content": prompt}]], None, self.params)[0][0].text
        body = re.sub(r"</?tool_call>", "", reply).strip()[: self.max_chars]
        text = f"{SUMMARY_HEAD}\n{body}" if body else _summary(lines, self.max_chars)
        return [{"role": "user", "content": text}, *recent]
