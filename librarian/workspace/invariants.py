"""The store's invariants as one checkable function (used by tests and `librarian demo`)."""

from __future__ import annotations

from librarian.workspace.nodes import Node, SnapshotMeta
from librarian.workspace.paths import normalize_path, parent_of


def invariant_violations(nodes: list[Node], meta: SnapshotMeta) -> list[str]:
    """Every broken rule of a snapshot, as readable lines; empty when the snapshot is sound.

    Rules: ids unique; active paths unique, normalised and nested under an
    active parent; no edge of an active node dangles, loops or repeats; the
    ledger agrees with each node's kind; steps never lie in the future.
    """
    problems: list[str] = []
    ids = [n.id for n in nodes]
    if len(set(ids)) != len(ids):
        problems.append("duplicate node ids")
    active = {n.id: n for n in nodes if n.active}
    paths: dict[str, str] = {}
    for node in active.values():
        if node.path in paths:
            problems.append(f"{node.id} and {paths[node.path]} share path {node.path!r}")
        paths[node.path] = node.id
    for node in active.values():
        if normalize_path(node.path) != node.path or not node.path:
            problems.append(f"{node.id}: path {node.path!r} is not normalised")
        parent = parent_of(node.path)
        if parent and parent not in paths:
            problems.append(f"{node.id}: parent {parent!r} of {node.path!r} does not exist")
        for kind, edges in (("link", node.links), ("provenance", node.provenance)):
            if len(set(edges)) != len(edges):
                problems.append(f"{node.id}: repeated {kind} edge")
            for target in edges:
                if target == node.id:
                    problems.append(f"{node.id}: {kind} edge to itself")
                elif target not in active:
                    problems.append(f"{node.id}: {kind} edge to missing node {target}")
    for node in nodes:
        if node.kind == "raw":
            if node.flag not in ("untouched", "edited") or node.origin is None:
                problems.append(f"{node.id}: raw node with ledger flag={node.flag} origin={node.origin}")
            if meta.raw_policy == "immutable" and (node.flag != "untouched" or not node.active):
                problems.append(f"{node.id}: raw node changed under the immutable policy")
        elif node.flag != "authored" or node.origin is not None:
            problems.append(f"{node.id}: {node.kind} node with ledger flag={node.flag} origin={node.origin}")
        if node.created_step > meta.step:
            problems.append(f"{node.id}: created at step {node.created_step} after the current step {meta.step}")
        if node.deleted_step is not None and not node.created_step <= node.deleted_step <= meta.step:
            problems.append(f"{node.id}: deleted at step {node.deleted_step} outside {node.created_step}..{meta.step}")
    return problems
