"""The arms of the JAM evaluation (paper 002, Table 4): stores, search contexts and the one-shot baseline.

- `build_store(sessions, "hierarchical")`: the memorizer's workspace (memos,
  group READMEs, raw sessions under `sessions/`);
- `build_store(sessions, "flat")`: the "no memorizer" arm: exactly the raw
  layer of the hierarchical store (`sessions/<id>`), nothing else;
- `research_context(ws, mode)`: the researcher's tools over a freshly
  built index; mode "hybrid" is the full system, "dense" is "no BM25",
  "bm25" is "no dense";
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
from librarian.search.embedded import EmbeddedIndex
from librarian.search.embedders import Embedder, make_embedder
from librarian.search.sync import IndexSync
from librarian.workspace.nodes import Document
from librarian.workspace.store import Workspace

StoreKind = Literal["hierarchical", "flat"]
STORE_KINDS: tuple[str, ...] = ("hierarchical", "flat")
SEARCH_MODES: tuple[str, ...] = ("hybrid", "bm25", "dense")
INDEX_S = "index_s"  # key of ToolContext.extra: seconds spent building the index

_EMBEDDERS: dict[str, Embedder] = {}


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


def embedder_named(embedder: str | Embedder) -> Embedder:
    """An embedder by name (as `make_embedder` takes it), loaded once per process; instances pass through.

    The model is loaded here (one warm-up encode), so the first store's construction time is not inflated.
    """
    if not isinstance(embedder, str):
        return embedder
    if embedder not in _EMBEDDERS:
        made = make_embedder(embedder)
        if made is None:
            raise ValueError("the researcher's search needs an embedder ('minilm' or 'hashing'), got 'none'")
        made.encode(["warm up"])  # load the model now, so construction times measure indexing only
        _EMBEDDERS[embedder] = made
    return _EMBEDDERS[embedder]


def research_context(workspace: Workspace, mode: str = "hybrid", embedder: str | Embedder = "minilm") -> ToolContext:
    """The researcher's tool context over `workspace`: an embedded index, synced and embedded, searching in `mode`.

    The seconds spent indexing are in `ctx.extra["index_s"]`.
    """
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown search mode {mode!r}; use one of {', '.join(SEARCH_MODES)}")
    model = embedder_named(embedder)
    start = time.perf_counter()
    index = EmbeddedIndex("jam", model)
    sync = IndexSync(index, workspace)
    sync.sync(embed=True)
    return ToolContext(workspace, index, sync, search_mode=mode, extra={INDEX_S: time.perf_counter() - start})


def with_mode(ctx: ToolContext, mode: str) -> ToolContext:
    """The same workspace and index searched in another mode (no re-indexing)."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown search mode {mode!r}; use one of {', '.join(SEARCH_MODES)}")
    return replace(ctx, search_mode=mode, extra=dict(ctx.extra))


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
