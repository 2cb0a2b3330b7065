"""Every op, every rule, and every rejection path of the live store."""

from __future__ import annotations

import pytest

from librarian.workspace import (
    Add,
    AddDocument,
    CreateFile,
    Delete,
    Document,
    Edit,
    Link,
    LinkMany,
    MakeDir,
    MergeFiles,
    Move,
    Unlink,
    Workspace,
    WorkspaceError,
    codec,
    replay,
)
from librarian.workspace.invariants import invariant_violations


def assert_rejected(ws: Workspace, op, match: str) -> None:
    before = ws.state()
    version = ws.version
    with pytest.raises(WorkspaceError, match=match):
        ws.apply(op)
    assert ws.state() == before, "a rejected op changed the store"
    assert ws.version == version


def assert_sound(ws: Workspace) -> None:
    assert invariant_violations(*ws.state()) == []


def test_from_documents_makes_raw_nodes_and_directories(ws: Workspace) -> None:
    raw = [n for n in ws if n.kind == "raw"]
    assert len(raw) == 5 and all(n.flag == "untouched" and n.origin == n.id for n in raw)
    assert ws.by_path("raw").kind == "directory"
    assert [n.id for n in ws.children("raw")] == ["f1", "f2", "f3", "f4", "f5"]
    assert_sound(ws)


def test_from_documents_rejects_duplicates_and_bad_paths() -> None:
    with pytest.raises(WorkspaceError, match="appears twice"):
        Workspace.from_documents([Document("a", "x"), Document("a", "y")])
    with pytest.raises(WorkspaceError, match="share the path"):
        Workspace.from_documents([Document("a", "x", path="p"), Document("b", "y", path="p")])
    with pytest.raises(WorkspaceError, match=r"\.\."):
        Workspace.from_documents([Document("a", "x", path="../etc/passwd")])
    with pytest.raises(WorkspaceError, match="raw_policy"):
        Workspace.from_documents([], raw_policy="sometimes")  # type: ignore[arg-type]


def test_add_creates_authored_synthetic_node(kb: Workspace) -> None:
    result = kb.apply(Add("Residents of Dorringham", links=("f2",)))
    node = kb.get(result.created[0])
    assert node.kind == "synthetic" and node.flag == "authored" and node.origin is None
    assert node.links == ("f2",) and node.path == node.id and node.created_step == 1
    assert_sound(kb)


def test_add_rejects_unknown_link_target(kb: Workspace) -> None:
    assert_rejected(kb, Add("index", links=("f1", "nope")), "does not exist")


def test_edit_flags_untouched_as_edited_in_editable_store(kb: Workspace) -> None:
    kb.apply(Edit("f1", "Alice Johnson's job is tree surgeon."))
    assert kb.get("f1").flag == "edited" and kb.get("f1").origin == "f1"
    assert_rejected(kb, Edit("f1", "Alice Johnson's job is tree surgeon."), "changes nothing")


def test_raw_nodes_are_immutable_by_default(ws: Workspace) -> None:
    assert_rejected(ws, Edit("f1", "changed"), "raw document")
    assert_rejected(ws, Delete("f1"), "raw document")
    assert_rejected(ws, Link("f1", "f2"), "raw document")
    assert_rejected(ws, Move("f1", "elsewhere/f1.txt"), "raw document")


def test_delete_cascades_so_no_edge_dangles(kb: Workspace) -> None:
    index = kb.apply(Add("Alice Johnson", links=("f1", "f2"))).created[0]
    hub = kb.apply(Add("People", links=(index,))).created[0]
    result = kb.apply(Delete(index))
    assert result.deleted == (index,) and hub in result.changed
    assert kb.get(index) is None and kb.get_any(index).deleted_step == result.step
    assert kb.get(hub).links == ()
    assert_sound(kb)
    assert_rejected(kb, Delete(index), "was deleted")


def test_delete_refuses_a_node_with_nested_children(ws: Workspace) -> None:
    ws.apply(MakeDir("notes", "Notes"))
    ws.apply(CreateFile("notes/a.md", "a", ("f1",)))
    assert_rejected(ws, Delete("notes"), "nested under it")


def test_link_rules(kb: Workspace) -> None:
    kb.apply(Link("f1", "f2"))
    assert kb.get("f1").links == ("f2",)
    assert_rejected(kb, Link("f1", "f2"), "already links")
    assert_rejected(kb, Link("f1", "f1"), "itself")
    assert_rejected(kb, Link("f1", "ghost"), "does not exist")
    kb.apply(Unlink("f1", "f2"))
    assert kb.get("f1").links == ()
    assert_rejected(kb, Unlink("f1", "f2"), "does not link")


def test_link_many_accepts_forty_and_rejects_more_without_truncating() -> None:
    ws = Workspace.from_documents([Document(f"d{i}", f"fact {i}") for i in range(45)], raw_policy="editable")
    hub = ws.apply(Add("hub")).created[0]
    assert_rejected(ws, LinkMany(hub, tuple(f"d{i}" for i in range(41))), "at most 40")
    assert ws.get(hub).links == ()
    ws.apply(LinkMany(hub, tuple(f"d{i}" for i in range(40))))
    assert len(ws.get(hub).links) == 40
    result = ws.apply(LinkMany(hub, ("d39", "d40", "d40")))
    assert ws.get(hub).links[-1] == "d40" and "1 already linked" in result.message
    assert_rejected(ws, LinkMany(hub, ()), "at least one")
    assert_rejected(ws, LinkMany(hub, ("d1", "missing")), "does not exist")


def test_move_carries_the_subtree(ws: Workspace) -> None:
    ws.apply(MakeDir("a", "A"))
    ws.apply(CreateFile("a/x.md", "x", ("f1",)))
    ws.apply(Move("a", "b/c"))
    assert ws.by_path("b/c/x.md").text == "x" and ws.by_path("a") is None
    assert ws.by_path("b").kind == "directory"
    assert_rejected(ws, Move("b/c", "b/c/inner"), "into itself")
    assert_rejected(ws, Move("b/c/x.md", "raw"), "already taken")
    assert_sound(ws)


def test_make_dir_and_nesting_under_raw_is_rejected(ws: Workspace) -> None:
    ws.apply(MakeDir("topics/people", "People"))
    assert ws.by_path("topics").kind == "directory"
    assert_rejected(ws, MakeDir("topics/people"), "already taken")
    assert_rejected(ws, MakeDir("raw/f1.txt/sub"), "raw document")
    assert_rejected(ws, MakeDir(""), "workspace root")


def test_create_file_records_provenance(ws: Workspace) -> None:
    node = ws.get(ws.apply(CreateFile("people/alice.md", "Alice: arborist", ("f1", "raw/f2.txt", "f1"))).created[-1])
    assert node.provenance == ("f1", "f2") and node.links == ()
    assert_rejected(ws, CreateFile("people/x.md", "x", ()), "at least one source")
    assert_rejected(ws, CreateFile("people/alice.md", "dup", ("f1",)), "already taken")


def test_merge_files_nests_children_under_a_linking_parent(ws: Workspace) -> None:
    a = ws.apply(CreateFile("a.md", "A", ("f1",))).created[-1]
    b = ws.apply(CreateFile("b.md", "B", ("f3",))).created[-1]
    parent = ws.get(ws.apply(MergeFiles((a, "b.md"), "summary.md", "A and B")).created[-1])
    assert parent.links == (a, b)
    assert ws.get(a).path == "summary.md/a.md" and ws.get(b).path == "summary.md/b.md"
    assert [n.id for n in ws.children("summary.md")] == [a, b]
    assert_sound(ws)


def test_merge_files_rejections(ws: Workspace) -> None:
    a = ws.apply(CreateFile("x/a.md", "A", ("f1",))).created[-1]
    b = ws.apply(CreateFile("y/a.md", "B", ("f1",))).created[-1]
    assert_rejected(ws, MergeFiles((), "m.md", "m"), "at least one")
    assert_rejected(ws, MergeFiles(("f1",), "m.md", "m"), "synthetic")
    assert_rejected(ws, MergeFiles((a, a), "m.md", "m"), "same child twice")
    assert_rejected(ws, MergeFiles((a, b), "m.md", "m"), "both named")
    assert_rejected(ws, MergeFiles((a,), "x/a.md/m.md", "m"), "inside its child")


def test_ops_resolve_paths_as_well_as_ids(ws: Workspace) -> None:
    node_id = ws.apply(CreateFile("n/alice.md", "Alice", ("f1",))).created[-1]
    ws.apply(Edit("n/alice.md", "Alice Johnson"))
    assert ws.get(node_id).text == "Alice Johnson"


def test_changes_since_reports_upserts_and_deletes(kb: Workspace) -> None:
    start = kb.version
    a = kb.apply(Add("a")).created[0]
    kb.apply(Link(a, "f1"))
    b = kb.apply(Add("b")).created[0]
    kb.apply(Delete(b))
    changes = kb.changes_since(start)
    assert changes.upserted == {a} and changes.deleted == {b} and changes.version == kb.version
    assert kb.changes_since(kb.version).upserted == frozenset()
    with pytest.raises(WorkspaceError):
        kb.changes_since(kb.version + 1)


def test_new_ids_never_collide_with_document_ids() -> None:
    ws = Workspace.from_documents([Document("n0", "zero"), Document("n1", "one")], raw_policy="editable")
    new = ws.apply(Add("two")).created[0]
    assert new not in ("n0", "n1")


def _indexes(ws: Workspace) -> tuple:
    paths = sorted({n.parent_path for n in ws} | {""})
    ids = sorted(n.id for n in ws.all_nodes())
    return ({p: [n.id for n in ws.children(p)] for p in paths},
            {i: sorted(ws.referrer_ids(i)) for i in ids}, {n.path: ws.by_path(n.path).id for n in ws}, len(ws))


def test_copies_share_nothing_observable(kb: Workspace) -> None:
    hub = kb.apply(Add("hub", path="idx/hub", links=("f1", "f2"))).created[-1]
    twin = kb.copy()
    kb.apply(Link(hub, "f3"))
    kb.apply(Move(hub, "elsewhere/hub"))
    twin.apply(Delete(hub))
    twin.apply(Add("other", path="idx/other", links=("f1",)))
    for side in (kb, twin):
        assert _indexes(side) == _indexes(Workspace.from_state(*side.state()))
    assert kb.get(hub) is not None and twin.get(hub) is None


def test_to_table_tracks_changes_and_hash_is_stable(curated: Workspace) -> None:
    first = curated.to_table()
    assert first.equals(codec.nodes_to_table(*curated.state()))
    curated.apply(Edit("people/friends.md", "Friends of Alice."))
    assert curated.to_table().equals(codec.nodes_to_table(*curated.state()))
    assert curated.content_hash() == codec.content_hash(*curated.state()) == curated.copy().content_hash()


def test_add_document_ingests_a_raw_node_through_the_trace(ws: Workspace) -> None:
    initial = ws.copy()
    result = ws.apply(AddDocument("s9", "Session 9: Ada moved.", "sessions/s9"))
    node = ws.get("s9")
    assert result.created[-1] == "s9" and node.kind == "raw" and node.flag == "untouched" and node.origin == "s9"
    assert ws.by_path("sessions").kind == "directory"
    assert_rejected(ws, AddDocument("s9", "again"), "already taken")
    assert_rejected(ws, AddDocument("s10", "x", "sessions/s9"), "already taken")
    assert_rejected(ws, Edit("s9", "changed"), "raw document")
    assert replay(initial, ws.trace).state() == ws.state()
    assert_sound(ws)


def test_add_document_id_is_never_given_to_a_folder_it_creates():
    """Regression: the folders of an AddDocument's path were allocated the document's own id first."""
    ws = Workspace.from_documents([Document("d0", "x")])
    ws.apply(AddDocument(id="n0", text="t", path="a/b"))
    doc = ws.get("n0")
    assert doc.kind == "raw" and doc.path == "a/b" and doc.text == "t"
    folder = next(n for n in ws if n.path == "a")
    assert folder.kind == "directory" and folder.id != "n0"
    assert invariant_violations(*ws.state()) == []
