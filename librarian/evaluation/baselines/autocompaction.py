"""AutoCompaction-style baseline: the corpus compacted into summary files, chunk by chunk.

The way an agent harness compacts a context that outgrew its window: the raw
documents, in path order, are cut into consecutive chunks of about
`chunk_tokens` estimated tokens (at most `max_docs` documents each); the
content executor (`librarian.roles.content_executor`: extractive by default,
or an LLM executor through any policy backend) writes one summary per chunk
as a `CreateFile` under `folder/`, whose provenance is the chunk's documents.
No structure beyond that: no links (`link_sources` adds them), no
hierarchy. The raw documents stay, as every store's faithful fallback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.evaluation.baselines.common import (
    BaselineError,
    BuildResult,
    apply_ops,
    corpus_tokens,
    link_ops,
    raw_documents,
    written_tokens,
)
from librarian.models import make_backend
from librarian.models.base import SamplingParams
from librarian.roles.content_executor import ExtractiveExecutor, LLMExecutor, Source
from librarian.workspace import CreateFile, MakeDir, Op, Workspace
from librarian.workspace.views import estimate_tokens


@dataclass(frozen=True, slots=True)
class AutoCompactionOptions:
    """Chunk size (tokens, documents), the executor ('extractive' or 'llm' with a backend), summary bound."""

    chunk_tokens: int = 400
    max_docs: int = 40
    executor: str = "extractive"
    backend: str = "hf"
    backend_args: dict[str, Any] = field(default_factory=lambda: {"model": "smollm2"})
    max_chars: int = 800
    max_new_tokens: int = 400  # the llm executor's reply length
    link_sources: bool = False
    folder: str = "compacted"


def chunks(docs: list[tuple[str, str]], chunk_tokens: int, max_docs: int) -> list[list[tuple[str, str]]]:
    """Consecutive groups of documents, each closed once it holds `chunk_tokens` tokens or `max_docs` documents."""
    out: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    tokens = 0
    for doc in docs:
        current.append(doc)
        tokens += estimate_tokens(len(doc[1]))
        if tokens >= chunk_tokens or len(current) >= max_docs:
            out.append(current)
            current, tokens = [], 0
    if current:
        out.append(current)
    return out


def make_executor(options: AutoCompactionOptions) -> Any:
    """The content executor the options name."""
    if options.executor == "extractive":
        return ExtractiveExecutor(max_chars=options.max_chars)
    if options.executor == "llm":
        backend = make_backend(options.backend, **dict(options.backend_args))
        params = SamplingParams(max_new_tokens=options.max_new_tokens, temperature=0.0)
        return LLMExecutor(backend, max_chars=options.max_chars, params=params)
    raise BaselineError(f"autocompaction: executor must be 'extractive' or 'llm', got {options.executor!r}")


def build_autocompaction(ws: Workspace, options: AutoCompactionOptions | None = None) -> BuildResult:
    """A copy of `ws` plus one summary file per chunk of raw documents (provenance: the chunk)."""
    options = options or AutoCompactionOptions()
    if options.chunk_tokens < 1 or options.max_docs < 1 or options.max_chars < 20 or options.max_new_tokens < 1:
        raise BaselineError(f"autocompaction: need chunk_tokens, max_docs, max_new_tokens >= 1 and max_chars >= 20, "
                            f"got {options.chunk_tokens}, {options.max_docs}, {options.max_new_tokens}, "
                            f"{options.max_chars}")
    executor = make_executor(options)
    docs = raw_documents(ws)
    paths = {n.id: n.path for n in ws}
    out = ws.copy()
    ops: list[Op] = [MakeDir(options.folder, "The corpus compacted: each summary covers a run of consecutive "
                                             "documents, named in its provenance.")]
    groups = chunks(docs, options.chunk_tokens, options.max_docs)
    for i, group in enumerate(groups):
        path = f"{options.folder}/summary-{i:04d}"
        text = executor(path, [Source(paths[d], t) for d, t in group], "what these documents state")
        ids = tuple(d for d, _ in group)
        ops.append(CreateFile(path, text or "(empty)", ids))
        if options.link_sources:
            ops += link_ops(path, ids)
    n = apply_ops(out, ops, "autocompaction")
    cost = corpus_tokens(t for _, t in docs) + written_tokens(ops)
    return BuildResult("autocompaction", out, n, cost, {"summaries": len(groups), "executor": options.executor})
