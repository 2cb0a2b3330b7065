"""Index quality by key kind (paper 001, Table V): out-degree, link precision and member recall.

Dataset-independent core: each index arrives as an `AuthoredIndex` already
judged against ground truth (for KBGym by `kbgym_index.kbgym_index_records`).
Precision is micro-averaged (correct scored links / scored links of the
kind); member recall is the mean over indexes of the share of the key's true
members that some correct link reaches. Only indexes with a resolved key and
at least one link are scored; empty and unresolved ones are counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Status = Literal["index", "materialized", "empty", "unresolved"]
STATUSES: tuple[str, ...] = ("index", "materialized", "empty", "unresolved")


@dataclass(frozen=True, slots=True)
class AuthoredIndex:
    """One authored index: its key kind (None if unresolved), links, and how they score.

    `scored_links`/`correct_links` count links whose target the ground truth
    can judge (links to other indexes are not scored); `members`/`members_hit`
    count the key's true members and those some correct link reaches;
    `correct_targets` are the ids of correctly linked documents.
    """

    node_id: str
    kind: str | None
    label: str
    status: Status
    degree: int
    scored_links: int = 0
    correct_links: int = 0
    members: int = 0
    members_hit: int = 0
    correct_targets: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"index {self.node_id}: status must be one of {STATUSES} (got {self.status!r})")
        if not 0 <= self.correct_links <= self.scored_links <= self.degree:
            raise ValueError(f"index {self.node_id}: need 0 <= correct ({self.correct_links}) <= scored "
                             f"({self.scored_links}) <= degree ({self.degree})")
        if not 0 <= self.members_hit <= self.members:
            raise ValueError(f"index {self.node_id}: members_hit {self.members_hit} not in 0..{self.members}")

    @property
    def scored(self) -> bool:
        return self.kind is not None and self.degree > 0 and self.status in ("index", "materialized")


@dataclass(frozen=True, slots=True)
class KindQuality:
    """One row of the table: indexes of one key kind (or `all`)."""

    kind: str
    n: int
    mean_degree: float
    precision: float
    recall: float


@dataclass(frozen=True, slots=True)
class IndexQuality:
    """Rows by kind plus the pooled row, and the status counts over all authored indexes."""

    rows: tuple[KindQuality, ...]
    overall: KindQuality | None
    counts: dict[str, int]


def _row(kind: str, recs: Sequence[AuthoredIndex]) -> KindQuality:
    scored = sum(r.scored_links for r in recs)
    precision = sum(r.correct_links for r in recs) / scored if scored else 0.0
    recalls = [r.members_hit / r.members for r in recs if r.members]
    return KindQuality(kind, len(recs), sum(r.degree for r in recs) / len(recs), precision,
                       sum(recalls) / len(recalls) if recalls else 0.0)


def index_quality(records: Sequence[AuthoredIndex]) -> IndexQuality:
    """Table V over judged index records (kinds in first-seen order)."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in records:
        counts[r.status] += 1
    scored = [r for r in records if r.scored]
    kinds = list(dict.fromkeys(r.kind for r in scored))
    rows = tuple(_row(k, [r for r in scored if r.kind == k]) for k in kinds)  # type: ignore[arg-type]
    return IndexQuality(rows, _row("all", scored) if scored else None, counts)


def verified_coverage(records: Sequence[AuthoredIndex], raw_total: int) -> float:
    """Share of the `raw_total` source documents that some correct index link reaches."""
    if raw_total <= 0:
        raise ValueError(f"raw_total must be > 0 (got {raw_total})")
    hit = frozenset().union(*(r.correct_targets for r in records if r.scored)) if records else frozenset()
    return len(hit) / raw_total
