"""The arms of the JAM evaluation (paper 002, Table 4): stores, search contexts and the one-shot baseline.

- `build_store(sessions, "hierarchical")`: the memorizer's workspace (memos,
  group READMEs, raw sessions under `sessions/`);
- `build_store(sessions, "flat")`: the "no memorizer" arm: exactly the raw
  layer of the hierarchical store (`sessions/<id>`), nothing else;
- the researcher's tools over a freshly built index are
  `librarian.roles.research_context`'s (mode "hybrid" is the full system,
  "dense" is "no BM25", "bm25" is "no dense");
- `one_shot(ctx, request)`: the "no researcher" arm: one search, the top
  hits as the context, their raw sources traced through provenance.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from librarian.roles.memorizer import SESSIONS, MemoFn, Memorizer, extractive_memo
from librarian.roles.researcher_tools import Finalized, trace_sources
from librarian.roles.tools import ToolContext
from librarian.workspace.nodes import Document
from librarian.workspace.store import Workspace

StoreKind = Literal["hierarchical", "flat"]
STORE_KINDS: tuple[str, ...] = ("hierarchical", "flat")


@dataclass(frozen=True, slots=True)
class MemoryStore:
    """A built memory workspace, how long building it took, and which arm it is."""

    workspace: Workspace
    build_s: float
    kind: str


def build_store(sessions: Sequence[Document], kind: StoreKind, memo_fn: MemoFn | None = None) -> MemoryStore:
    """The hierarchical (memorized) or flat (raw sessions only) store of `sessions`, timed."""
    if kind not in STORE_KINDS:
        raise ValueError(f"unknown store kind {kind!r}; use one of {', '.join(STORE_KINDS)}")
    if not sessions:
        raise ValueError("build_store needs at least one session")
    start = time.perf_counter()
    if kind == "hierarchical":
        ws = Memorizer(memo_fn or extractive_memo).memorize(sessions)
    else:
        ws = Workspace.from_documents([replace(s, path=f"{SESSIONS}/{s.id}") for s in sessions])
    return MemoryStore(ws, time.perf_counter() - start, kind)


def one_shot(ctx: ToolContext, request: str, k: int = 5) -> Finalized:
    """The "no researcher" arm: the top-`k` hits of one search (in the context's mode) and their raw sources."""
    if ctx.index is None:
        raise ValueError("one_shot needs a tool context with a search index (build it with research_context)")
    if k < 1:
        raise ValueError(f"one_shot k must be >= 1, got {k}")
    hits = ctx.index.search(request, k=k, mode=ctx.search_mode)  # type: ignore[arg-type]
    raw, _ = trace_sources(ctx.workspace, [h.id for h in hits])
    context = "\n\n".join(f"[{h.path}]\n{h.text}" for h in hits)
    return Finalized(context, tuple(raw), bool(hits), tuple(h.path for h in hits))
