"""The near-duplicate guard (paper 001 §VI-C).

On Add and Edit, a similarity function proposes the nearest existing nodes; a
candidate above the threshold goes to a judge callback, whose verdict decides
whether the write is merged into the candidate instead. Verdicts are recorded
in the trace, so replay never calls the similarity function or the judge.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from librarian.workspace.nodes import Node

# (candidate text, nodes to compare with) -> [(node id, similarity)], best first
SimilarityFn = Callable[[str, Iterable[Node]], list[tuple[str, float]]]
# (candidate text, existing node) -> True when the candidate duplicates it
JudgeFn = Callable[[str, Node], bool]


@dataclass(frozen=True, slots=True)
class DedupVerdict:
    """One judged candidate: the existing node, its similarity, and the judge's answer."""

    candidate: str
    similarity: float
    duplicate: bool

    def to_dict(self) -> dict[str, object]:
        return {"candidate": self.candidate, "similarity": self.similarity, "duplicate": self.duplicate}

    @staticmethod
    def from_dict(data: dict[str, object]) -> DedupVerdict:
        return DedupVerdict(str(data["candidate"]), float(data["similarity"]), bool(data["duplicate"]))  # type: ignore[arg-type]


_WORD = re.compile(r"\w+", re.UNICODE)


def _token_set(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the lower-cased word sets of two texts (1.0 for two empty texts)."""
    sa, sb = _token_set(a), _token_set(b)
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def jaccard_candidates(text: str, nodes: Iterable[Node]) -> list[tuple[str, float]]:
    """A dependency-free similarity function: Jaccard over word sets against every node."""
    scored = [(node.id, jaccard(text, node.text)) for node in nodes]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored


def always_duplicate(_text: str, _node: Node) -> bool:
    """A judge that accepts every candidate above the threshold (similarity alone decides)."""
    return True


@dataclass
class NearDuplicateGuard:
    """Finds near-duplicates of a write among the active raw and synthetic nodes.

    `similarity` ranks candidates (for example cosine over the search index's
    embeddings, injected by a higher layer); the `top_k` best at or above
    `threshold` are judged in order, and the first accepted one wins.
    """

    similarity: SimilarityFn = jaccard_candidates
    judge: JudgeFn = always_duplicate
    threshold: float = 0.9
    top_k: int = 3

    def check(self, text: str, nodes: Iterable[Node], exclude: str | None = None) -> tuple[DedupVerdict, ...]:
        """Judge the candidates for `text`; stops at the first duplicate."""
        pool = [n for n in nodes if n.kind != "directory" and n.id != exclude]
        by_id = {n.id: n for n in pool}
        verdicts: list[DedupVerdict] = []
        for node_id, score in self.similarity(text, pool)[: self.top_k]:
            if score < self.threshold:
                break
            is_dup = bool(self.judge(text, by_id[node_id]))
            verdicts.append(DedupVerdict(node_id, float(score), is_dup))
            if is_dup:
                break
        return tuple(verdicts)
