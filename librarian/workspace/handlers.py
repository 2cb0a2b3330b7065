"""One planning function per op: validate against the rules, then stage the writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from librarian.workspace.change_set import OpPlan, OpResult
from librarian.workspace.dedup import DedupVerdict, NearDuplicateGuard
from librarian.workspace.errors import WorkspaceError
from librarian.workspace.nodes import Node
from librarian.workspace.ops import (
    MAX_LINK_MANY_TARGETS,
    Add,
    AddDocument,
    CreateFile,
    Delete,
    Edit,
    Link,
    LinkMany,
    MakeDir,
    MergeFiles,
    Move,
    Op,
    Unlink,
)
from librarian.workspace.paths import normalize_file_path, validate_id

Verdicts = tuple[DedupVerdict, ...] | None


def _judge(plan: OpPlan, guard: NearDuplicateGuard | None, text: str, exclude: str | None,
           recorded: Verdicts) -> tuple[tuple[DedupVerdict, ...], Node | None]:
    """The dedup verdicts for a write (recorded ones on replay) and the node it duplicates."""
    if recorded is None:
        recorded = guard.check(text, iter(plan.store), exclude=exclude) if guard is not None else ()
    winner = next((v for v in recorded if v.duplicate), None)
    if winner is None:
        return recorded, None
    target = plan.active(winner.candidate)
    if target is None:
        raise WorkspaceError(f"recorded duplicate {winner.candidate!r} is not in the workspace; the trace does not match")
    return recorded, target


def _absorb(plan: OpPlan, into: Node, links: tuple[str, ...], provenance: tuple[str, ...],
            origins: tuple[str, ...]) -> None:
    """Fold edges and origins into `into` (edges only where the node may change)."""
    absorbed = into.absorbed + tuple(o for o in origins if o not in into.absorbed and o != into.origin)
    if into.kind == "raw" and plan.raw_protected:
        plan.put(replace(into, absorbed=absorbed))
        return
    new_links = into.links + tuple(i for i in links if i not in into.links and i != into.id)
    new_prov = into.provenance + tuple(i for i in provenance if i not in into.provenance and i != into.id)
    plan.put(replace(into, links=new_links, provenance=new_prov, absorbed=absorbed))


def plan_add(plan: OpPlan, op: Add, guard: NearDuplicateGuard | None, recorded: Verdicts) -> OpResult:
    if len(op.links) > MAX_LINK_MANY_TARGETS:
        raise WorkspaceError(
            f"add takes at most {MAX_LINK_MANY_TARGETS} links, got {len(op.links)}; nothing was added. "
            "Add it with the first links, then link_many the rest in batches of at most "
            f"{MAX_LINK_MANY_TARGETS} (or narrow the set)"
        )
    links = plan.targets(op.links, "link target")
    provenance = plan.targets(op.provenance, "provenance source")
    verdicts, duplicate = _judge(plan, guard, op.text, None, recorded)
    if duplicate is not None:
        _absorb(plan, duplicate, links, provenance, ())
        return plan.result(op.name, f"not added: near-duplicate of {duplicate.id!r}; merged into it", duplicate.id, verdicts)
    path = normalize_file_path(op.path) if op.path is not None else plan.peek_id()
    node = plan.create(path, "synthetic", op.text, links=links, provenance=provenance)
    return plan.result(op.name, f"added {node.id!r} at {node.path!r}", verdicts=verdicts)


def plan_edit(plan: OpPlan, op: Edit, guard: NearDuplicateGuard | None, recorded: Verdicts) -> OpResult:
    node = plan.resolve(op.target)
    plan.require_mutable(node, "edit")
    if op.text == node.text:
        raise WorkspaceError(f"edit of {node.id!r} changes nothing: the text is identical")
    verdicts: tuple[DedupVerdict, ...] = ()
    if node.kind != "directory":
        verdicts, duplicate = _judge(plan, guard, op.text, node.id, recorded)
        if duplicate is not None:
            origins = ((node.origin,) if node.origin else ()) + node.absorbed
            _absorb(plan, duplicate, node.links, node.provenance, origins)
            plan.delete(node, redirect_to=duplicate.id)
            return plan.result(op.name, f"{node.id!r} became a near-duplicate of {duplicate.id!r} and was merged into it",
                               duplicate.id, verdicts)
    flag = "edited" if node.flag == "untouched" else node.flag
    plan.put(replace(node, text=op.text, flag=flag))
    return plan.result(op.name, f"edited {node.id!r}", verdicts=verdicts)


def plan_delete(plan: OpPlan, op: Delete) -> OpResult:
    node = plan.resolve(op.target)
    plan.require_mutable(node, "delete")
    plan.delete(node)
    return plan.result(op.name, f"deleted {node.id!r} ({node.path!r})")


def _linkable_source(plan: OpPlan, ref: str) -> Node:
    source = plan.resolve(ref, "source")
    plan.require_mutable(source, "add links to")
    return source


def plan_link(plan: OpPlan, op: Link) -> OpResult:
    source = _linkable_source(plan, op.source)
    target = plan.resolve(op.target, "target")
    if target.id == source.id:
        raise WorkspaceError(f"cannot link {source.id!r} to itself")
    if target.id in source.links:
        raise WorkspaceError(f"{source.id!r} already links to {target.id!r}")
    plan.put(replace(source, links=source.links + (target.id,)))
    return plan.result(op.name, f"linked {source.id!r} -> {target.id!r}")


def plan_link_many(plan: OpPlan, op: LinkMany) -> OpResult:
    if not op.targets:
        raise WorkspaceError("link_many needs at least one target")
    if len(op.targets) > MAX_LINK_MANY_TARGETS:
        raise WorkspaceError(
            f"link_many takes at most {MAX_LINK_MANY_TARGETS} targets, got {len(op.targets)}; nothing was linked. "
            "A set this large is a search result, not a key: narrow it, or split it over several index documents"
        )
    source = _linkable_source(plan, op.source)
    targets = plan.targets(op.targets, "target")
    if source.id in targets:
        raise WorkspaceError(f"cannot link {source.id!r} to itself")
    new = tuple(t for t in targets if t not in source.links)
    if not new:
        raise WorkspaceError(f"{source.id!r} already links to every one of these targets")
    plan.put(replace(source, links=source.links + new))
    skipped = len(targets) - len(new)
    note = f" ({skipped} already linked)" if skipped else ""
    return plan.result(op.name, f"linked {source.id!r} -> {len(new)} targets{note}")


def plan_unlink(plan: OpPlan, op: Unlink) -> OpResult:
    source = _linkable_source(plan, op.source)
    target = plan.resolve(op.target, "target")
    if target.id not in source.links:
        raise WorkspaceError(f"{source.id!r} does not link to {target.id!r}")
    plan.put(replace(source, links=tuple(i for i in source.links if i != target.id)))
    return plan.result(op.name, f"unlinked {source.id!r} -> {target.id!r}")


def plan_move(plan: OpPlan, op: Move) -> OpResult:
    node = plan.resolve(op.target)
    new_path = normalize_file_path(op.new_path)
    plan.relocate(node, new_path)
    return plan.result(op.name, f"moved {node.id!r} to {new_path!r}")


def plan_make_dir(plan: OpPlan, op: MakeDir) -> OpResult:
    path = normalize_file_path(op.path)
    node = plan.create(path, "directory", op.readme)
    return plan.result(op.name, f"made directory {node.path!r} ({node.id!r})")


def plan_create_file(plan: OpPlan, op: CreateFile) -> OpResult:
    if not op.sources:
        raise WorkspaceError("create_file needs at least one source (the raw documents or files it consolidates)")
    path = normalize_file_path(op.path)
    sources = plan.targets(op.sources, "source")
    node = plan.create(path, "synthetic", op.text, provenance=sources)
    return plan.result(op.name, f"created {node.id!r} at {node.path!r} from {len(sources)} source(s)")


def plan_merge_files(plan: OpPlan, op: MergeFiles) -> OpResult:
    if not op.children:
        raise WorkspaceError("merge_files needs at least one child file")
    path = normalize_file_path(op.path)
    children = [plan.resolve(ref, "child") for ref in op.children]
    ids = [c.id for c in children]
    if len(set(ids)) != len(ids):
        raise WorkspaceError("merge_files lists the same child twice")
    names: set[str] = set()
    for child in children:
        if child.kind != "synthetic":
            raise WorkspaceError(f"merge_files merges synthetic files; {child.id!r} is {child.kind}")
        if path == child.path or path.startswith(child.path + "/"):
            raise WorkspaceError(f"the merged file {path!r} cannot be placed inside its child {child.path!r}")
        if child.name in names:
            raise WorkspaceError(f"two children are both named {child.name!r}; rename one first")
        names.add(child.name)
    for child in children:
        for other in children:
            if other.id != child.id and other.path.startswith(child.path + "/"):
                raise WorkspaceError(f"child {other.path!r} is already nested under child {child.path!r}")
    parent = plan.create(path, "synthetic", op.text, links=tuple(ids))
    for child in children:
        plan.relocate(plan.active(child.id), f"{path}/{child.name}")  # type: ignore[arg-type]
    return plan.result(op.name, f"merged {len(ids)} file(s) under {parent.id!r} at {parent.path!r}")


def plan_add_document(plan: OpPlan, op: AddDocument) -> OpResult:
    node_id = validate_id(op.id, "document id")
    existing = plan.node(node_id)
    if existing is not None:
        raise WorkspaceError(f"id {node_id!r} is already taken by a {existing.kind} node; raw documents need new ids")
    path = normalize_file_path(op.path if op.path is not None else node_id)
    plan.reserved.add(node_id)  # folders created for the path must not take the document's id
    plan.ensure_parents(path)
    taken = plan.id_at(path)
    if taken is not None:
        raise WorkspaceError(f"path {path!r} is already taken by {taken!r}")
    plan.put(Node(id=node_id, path=path, kind="raw", text=op.text, origin=op.origin or node_id,
                  flag="untouched", created_step=plan.step))
    plan.created.append(node_id)
    return plan.result(op.name, f"added raw document {node_id!r} at {path!r}")


PlanFn = Callable[[OpPlan, Op, NearDuplicateGuard | None, Verdicts], OpResult]

PLANNERS: dict[type[Op], PlanFn] = {
    Add: plan_add,  # type: ignore[dict-item]
    Edit: plan_edit,  # type: ignore[dict-item]
    Delete: lambda plan, op, _g, _v: plan_delete(plan, op),  # type: ignore[arg-type]
    Link: lambda plan, op, _g, _v: plan_link(plan, op),  # type: ignore[arg-type]
    LinkMany: lambda plan, op, _g, _v: plan_link_many(plan, op),  # type: ignore[arg-type]
    Unlink: lambda plan, op, _g, _v: plan_unlink(plan, op),  # type: ignore[arg-type]
    Move: lambda plan, op, _g, _v: plan_move(plan, op),  # type: ignore[arg-type]
    MakeDir: lambda plan, op, _g, _v: plan_make_dir(plan, op),  # type: ignore[arg-type]
    CreateFile: lambda plan, op, _g, _v: plan_create_file(plan, op),  # type: ignore[arg-type]
    MergeFiles: lambda plan, op, _g, _v: plan_merge_files(plan, op),  # type: ignore[arg-type]
    AddDocument: lambda plan, op, _g, _v: plan_add_document(plan, op),  # type: ignore[arg-type]
}
