"""The content executor (paper 000): writes a CreateFile / MergeFiles text from the sources the builder chose.

Two executors share one call shape, `executor(path, sources, instruction) -> text`:

- `ExtractiveExecutor` (CPU, deterministic): splits the sources into
  sentences, keeps the most central ones (highest mean term overlap with
  the other sentences, ties broken by position) up to a character bound, and
  writes them in source order under each source's path.
- `LLMExecutor`: asks any `PolicyBackend` with a prompt that holds the
  sources, takes the reply's text (a ```fence or `<content>` tags are
  unwrapped, tool-call tags dropped) and cuts it to the same bound.

The builder tools use an executor when a `create_file` / `merge_files`
call leaves out `text` and the `ToolContext` carries one in
`extra["content_executor"]` (see `builder_tools`); with `text` given the
builder's own text is used, as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from librarian.models.base import PolicyBackend, SamplingParams
from librarian.search.analysis import analyze
from librarian.workspace.nodes import Node

EXECUTOR_KEY = "content_executor"
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@dataclass(frozen=True, slots=True)
class Source:
    """One source the executor writes from: its path and text."""

    path: str
    text: str

    @classmethod
    def of(cls, node: Node) -> Source:
        return cls(node.path, node.text)


class ContentExecutor(Protocol):
    """Writes the text of a new file at `path` from its sources (an optional instruction steers it)."""

    def __call__(self, path: str, sources: Sequence[Source], instruction: str = "") -> str: ...


def sentences(text: str) -> list[str]:
    """Non-empty sentences and lines of a text, in order."""
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def centrality(units: Sequence[str]) -> list[float]:
    """Per sentence: mean Jaccard overlap of its analysed terms with every other sentence (0 when alone)."""
    terms = [set(analyze(u)) for u in units]
    out = []
    for i, a in enumerate(terms):
        if len(terms) < 2 or not a:
            out.append(0.0)
            continue
        total = sum(len(a & b) / len(a | b) for j, b in enumerate(terms) if j != i and b)
        out.append(total / (len(terms) - 1))
    return out


def extract(sources: Sequence[Source], max_chars: int, instruction: str = "") -> str:
    """The most central sentences of the sources (plus overlap with the instruction), in source order, bounded."""
    if max_chars < 20:
        raise ValueError(f"max_chars must be at least 20, got {max_chars}")
    if not sources:
        raise ValueError("the content executor needs at least one source")
    units = [(k, i, s) for k, src in enumerate(sources) for i, s in enumerate(sentences(src.text))]
    scores = centrality([u[2] for u in units])
    want = set(analyze(instruction))
    if want:
        scores = [sc + len(want & set(analyze(u[2]))) / len(want) for sc, u in zip(scores, units, strict=True)]
    ranked = sorted(range(len(units)), key=lambda n: (-scores[n], n))
    first_of = {k: next((n for n, u in enumerate(units) if u[0] == k), None) for k in range(len(sources))}
    chosen: set[int] = {n for n in first_of.values() if n is not None}  # every source says something
    budget = max_chars - sum(len(sources[k].path) + 4 for k in range(len(sources)))
    used = sum(len(units[n][2]) + 1 for n in chosen)
    for n in ranked:
        if n in chosen:
            continue
        cost = len(units[n][2]) + 1
        if used + cost <= budget:
            chosen.add(n)
            used += cost
    lines: list[str] = []
    for k, src in enumerate(sources):
        picked = [units[n][2] for n in sorted(chosen) if units[n][0] == k]
        if picked:
            lines.append(f"{src.path}: {' '.join(picked)}")
    return _bound("\n".join(lines), max_chars)


def _bound(text: str, max_chars: int) -> str:
    """Cut to at most `max_chars`, at a word boundary when one is near."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space > max_chars // 2 else cut).rstrip() + "..."


@dataclass(frozen=True, slots=True)
class ExtractiveExecutor:
    """Deterministic CPU executor: the most central sentences of the sources, at most `max_chars`."""

    max_chars: int = 1200

    def __call__(self, path: str, sources: Sequence[Source], instruction: str = "") -> str:
        return extract(sources, self.max_chars, instruction)


EXECUTOR_PROMPT = (
    "Write the content of the file {path} for a workspace that a reader will search. Keep every name, date, "
    "number and fact from the sources that a question could ask about; drop greetings and filler. At most "
    "{max_chars} characters. Reply with the content only.{instruction}\n\nSources:\n{sources}"
)
_FENCE = re.compile(r"```[a-zA-Z]*\n?(.*?)```", re.S)
_CONTENT = re.compile(r"<content>(.*?)(?:</content>|$)", re.S)
_TAGS = re.compile(r"</?tool_call>|<\|im_end\|>|<\|endoftext\|>")


def parse_content(reply: str, max_chars: int) -> str:
    """The file text in an executor reply: unwraps a fence or <content> tags, bounded; '' when empty."""
    m = _CONTENT.search(reply) or _FENCE.search(reply)
    text = m.group(1) if m else reply
    return _bound(_TAGS.sub("", text).strip(), max_chars)


@dataclass
class LLMExecutor:
    """Executor through any policy backend; falls back to extraction when the reply is empty."""

    backend: PolicyBackend
    max_chars: int = 1200
    params: SamplingParams = SamplingParams(max_new_tokens=400, temperature=0.0)
    source_chars: int = 4000

    def prompt(self, path: str, sources: Sequence[Source], instruction: str = "") -> str:
        if not sources:
            raise ValueError("the content executor needs at least one source")
        per = max(200, self.source_chars // len(sources))
        body = "\n\n".join(f"[{s.path}]\n{s.text[:per]}" for s in sources)
        extra = f" Focus: {instruction}" if instruction else ""
        return EXECUTOR_PROMPT.format(path=path, max_chars=self.max_chars, instruction=extra, sources=body)

    def __call__(self, path: str, sources: Sequence[Source], instruction: str = "") -> str:
        conv = [{"role": "user", "content": self.prompt(path, sources, instruction)}]
        reply = self.backend.generate([conv], None, self.params)[0][0].text
        text = parse_content(reply, self.max_chars)
        return text or extract(sources, self.max_chars, instruction)
