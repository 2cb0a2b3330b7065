"""Content-preserving ablations of a frozen workspace (paper 000 §A.5): flattened and shuffled.

- flattened: every synthetic file moves to the top level (deepest first, so a
  merge's children leave before their parent), then folders left empty are
  deleted. Text, links and provenance are unchanged; only the hierarchy goes.
- shuffled: semantic placement is permuted. Leaf synthetic files trade paths
  (a seeded permutation, through a temporary folder), and the targets of
  links leaving synthetic files are permuted across all such links, each
  file keeping its out-degree (a target that would repeat or point back at
  its source swaps with a later one, or is dropped when none fits).

Both start from a copy of the frozen store and go through workspace ops, so
the trace records them.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass

from librarian.evaluation.baselines.common import (
    BuildResult,
    apply_ops,
    link_ops,
    unique_path,
    written_tokens,
)
from librarian.workspace import Delete, Move, Op, Unlink, Workspace

TMP = "_shuffle"


@dataclass(frozen=True, slots=True)
class AblationOptions:
    """`seed` of the shuffle; which placements it permutes."""

    seed: int = 0
    paths: bool = True
    links: bool = True


def _depth(path: str) -> int:
    return path.count("/")


def build_flattened(ws: Workspace, options: AblationOptions | None = None) -> BuildResult:
    """A copy of `ws` with every synthetic file at the top level and empty folders removed."""
    out = ws.copy()
    applied: list[Op] = []
    taken = {n.path for n in out}
    for node in sorted((n for n in out if n.kind == "synthetic" and "/" in n.path),
                       key=lambda n: (-_depth(n.path), n.path)):
        current = out.get(node.id)
        target = unique_path("", current.name, taken)  # type: ignore[union-attr]
        op = Move(node.id, target)
        out.apply(op)
        applied.append(op)
    for node in sorted((n for n in out if n.kind == "directory"), key=lambda n: (-_depth(n.path), n.path)):
        if not out.children(node.path):
            op = Delete(node.id)
            out.apply(op)
            applied.append(op)
    return BuildResult("flattened", out, len(applied), written_tokens(applied),
                       {"moved": sum(isinstance(o, Move) for o in applied)})


def _permuted_targets(edges: list[tuple[str, str]], rng: random.Random) -> list[str | None]:
    """Targets of `edges` permuted; a target that would repeat for its source or point back at it swaps
    with a later one, or is dropped (None) when none fits."""
    targets: list[str | None] = [t for _, t in edges]
    rng.shuffle(targets)
    count: dict[str, Counter] = defaultdict(Counter)
    for (src, _), t in zip(edges, targets, strict=True):
        count[src][t] += 1
    for i, (src, _) in enumerate(edges):
        mine = targets[i]
        if mine != src and count[src][mine] <= 1:
            continue
        for j in range(i + 1, len(edges)):
            other, theirs = edges[j][0], targets[j]
            if other == src or theirs == src or count[src][theirs] or mine == other or count[other][mine]:
                continue
            count[src][mine] -= 1
            count[other][theirs] -= 1
            targets[i], targets[j] = theirs, mine
            count[src][theirs] += 1
            count[other][mine] += 1
            break
        else:
            count[src][mine] -= 1
            targets[i] = None
    return targets


def build_shuffled(ws: Workspace, options: AblationOptions | None = None) -> BuildResult:
    """A copy of `ws` whose leaf files trade places and whose synthetic links trade targets."""
    options = options or AblationOptions()
    rng = random.Random(f"shuffle:{options.seed}")
    out = ws.copy()
    ops: list[Op] = []
    moved = 0
    if options.paths:
        parents = {n.parent_path for n in out}
        leaves = sorted(n.id for n in out if n.kind == "synthetic" and n.path not in parents)
        paths = [out.get(i).path for i in leaves]  # type: ignore[union-attr]
        order = list(range(len(leaves)))
        rng.shuffle(order)
        if len(leaves) > 1:
            first = [Move(i, f"{TMP}/{k}") for k, i in enumerate(leaves)]
            apply_ops(out, first, "shuffle paths")
            second = [Move(leaves[k], paths[order[k]]) for k in range(len(leaves))]
            apply_ops(out, second, "shuffle paths")
            tmp = out.by_path(TMP)
            cleanup = [Delete(tmp.id)] if tmp is not None and not out.children(TMP) else []
            apply_ops(out, cleanup, "shuffle paths")
            ops += first + second + cleanup
            moved = sum(1 for k in range(len(leaves)) if order[k] != k)
    relinked = 0
    if options.links:
        edges = [(n.id, t) for n in sorted(out, key=lambda n: n.id) if n.kind == "synthetic" for t in n.links]
        new_targets = _permuted_targets(edges, rng)
        new_links: dict[str, list[str]] = {}
        for (src, _), tgt in zip(edges, new_targets, strict=True):
            targets_of = new_links.setdefault(src, [])
            if tgt is not None:
                targets_of.append(tgt)
        link_changes: list[Op] = []
        for src, targets in new_links.items():
            old = out.get(src).links  # type: ignore[union-attr]
            link_changes += [Unlink(src, t) for t in old if t not in targets]
            link_changes += link_ops(src, [t for t in targets if t not in old])
            relinked += sum(1 for t in targets if t not in old)
        apply_ops(out, link_changes, "shuffle links")
        ops += link_changes
    return BuildResult("shuffled", out, len(ops), written_tokens(ops), {"moved": moved, "relinked": relinked})
