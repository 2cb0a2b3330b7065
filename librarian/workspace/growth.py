"""How a store grew along its trace (paper 001 Fig. 4a), rebuilt by replay."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from librarian.workspace.errors import WorkspaceError
from librarian.workspace.store import Workspace
from librarian.workspace.trace import TraceEntry


@dataclass(frozen=True, slots=True)
class GrowthPoint:
    """The store after `step` ops: authored documents alive, net documents added, total links."""

    step: int
    authored_alive: int
    net_added: int
    links: int


def _point(ws: Workspace, initial_size: int) -> GrowthPoint:
    authored = sum(1 for n in ws if n.flag == "authored" and n.kind != "directory")
    links = sum(len(n.links) for n in ws)
    return GrowthPoint(ws.meta.step, authored, len(ws) - initial_size, links)


def store_growth(initial: Workspace, trace: Sequence[TraceEntry], points: int = 50) -> list[GrowthPoint]:
    """Replay `trace` over a copy of `initial`, sampling about `points` evenly spaced states."""
    if points < 1:
        raise WorkspaceError(f"points must be >= 1, got {points}")
    ws = initial.copy()
    ws.guard = None
    every = max(1, len(trace) // points)
    series = [_point(ws, len(initial))]
    for i, entry in enumerate(trace, start=1):
        ws.apply_payload(entry.op, verdicts=entry.verdicts)
        if i % every == 0 or i == len(trace):
            series.append(_point(ws, len(initial)))
    return series
