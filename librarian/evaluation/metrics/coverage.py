"""Coverage in the readings of paper 001 (§VII-B, "Coverage is the currency").

- document, one hop: share of active raw documents some active synthetic
  node (an index) links to or cites directly (`workspace.stats.coverage`);
- document, two hops: also through one intermediate node (of any kind, a
  superset of the paper's index-to-index reading);
- verified: only links a ground-truth check confirms as correct count (see
  `index_quality.verified_coverage`);
- questions: share of questions whose whole support set is reachable from
  indexes in one read (`single_index=True`: from one index alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from librarian.workspace.nodes import Node, NodeSource
from librarian.workspace.stats import coverage as stats_coverage


@dataclass(frozen=True, slots=True)
class CoverageReadings:
    """The coverage readings of one workspace (None where the input to compute one was not given)."""

    one_hop: float
    two_hop: float
    verified: float | None = None
    questions: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"one_hop": self.one_hop, "two_hop": self.two_hop, "verified": self.verified,
                "questions": self.questions}


def index_reach(node: Node) -> frozenset[str]:
    """What one read of an index shows: itself plus everything it links to or cites."""
    return frozenset((node.id, *node.links, *node.provenance))


def question_coverage(src: NodeSource, supports: Sequence[Sequence[str]], single_index: bool = False) -> float:
    """Share of questions whose support documents are all active and reachable from indexes in one read."""
    if not supports:
        raise ValueError("question_coverage needs at least one question's support set")
    if any(not s for s in supports):
        raise ValueError("every question needs a non-empty support set (a question without support cannot be covered)")
    active = {n.id for n in src}
    reaches = [index_reach(n) for n in src if n.kind == "synthetic"]
    union = frozenset().union(*reaches) if reaches else frozenset()
    hit = 0
    for support in supports:
        need = set(support)
        if not need <= active:
            continue
        if (any(need <= r for r in reaches) if single_index else need <= union):
            hit += 1
    return hit / len(supports)


def coverage_readings(src: NodeSource, supports: Sequence[Sequence[str]] | None = None,
                      verified: float | None = None, single_index: bool = False) -> CoverageReadings:
    """One- and two-hop document coverage, plus question coverage when supports are given."""
    one, two = stats_coverage(list(src))
    q = question_coverage(src, supports, single_index) if supports is not None else None
    return CoverageReadings(one, two, verified, q)
