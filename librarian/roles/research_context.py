"""The researcher's tool context over a workspace: an embedded index (BM25 + dense), synced and embedded.

`research_context(ws, mode)` builds it (mode `hybrid`, `bm25` or `dense`);
`with_mode` searches the same index in another mode. The rollout workers of
`train_researcher` and the JAM evaluation's arms (`evaluation.memory_arms`)
both use it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from librarian.roles.tools import ToolContext
from librarian.search.embedded import EmbeddedIndex
from librarian.search.embedders import Embedder, make_embedder
from librarian.search.sync import IndexSync
from librarian.workspace.store import Workspace

SEARCH_MODES: tuple[str, ...] = ("hybrid", "bm25", "dense")
INDEX_S = "index_s"  # key of ToolContext.extra: seconds spent building the index

_EMBEDDERS: dict[str, Embedder] = {}


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
