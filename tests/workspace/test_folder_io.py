"""Folder import and export: documents from disk, and a walkable folder tree with front matter."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from librarian.workspace import CreateFile, Link, MakeDir, MergeFiles, Node, Workspace, WorkspaceError
from librarian.workspace.folder_io import (
    documents_from_folder,
    export_folder,
    front_matter,
    split_front_matter,
)
from librarian.workspace.snapshot_view import SnapshotView


@pytest.fixture
def curated(ws: Workspace) -> Workspace:
    ws.apply(MakeDir("people", "People."))
    ws.apply(CreateFile("people/alice.md", "Alice: arborist.\n", ("f1", "f2")))
    ws.apply(CreateFile("people/bob.md", "Bob: baker.", ("f3",)))
    ws.apply(MergeFiles(("people/alice.md", "people/bob.md"), "people/friends.md", "Alice and Bob are friends."))
    ws.apply(Link("people/friends.md", "f4"))
    return ws


class ListSource:
    """The smallest NodeSource: a list of nodes, for export edge cases."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    def get(self, node_id: str) -> Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def by_path(self, path: str) -> Node | None:
        return next((n for n in self.nodes if n.path == path), None)

    def children(self, path: str) -> list[Node]:
        return sorted((n for n in self.nodes if n.parent_path == path), key=lambda n: n.path)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


def tree_of(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*")) if p.is_file()}


# --- import ----------------------------------------------------------------------------------


def test_documents_from_folder(tmp_path):
    (tmp_path / "notes" / "deep").mkdir(parents=True)
    (tmp_path / "a.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "notes" / "b.md").write_text("# B ü", encoding="utf-8")
    (tmp_path / "notes" / "deep" / "c.txt").write_text("", encoding="utf-8")
    (tmp_path / "skip.bin").write_bytes(b"\x00\xff")
    (tmp_path / ".hidden.txt").write_text("no", encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.txt").write_text("no", encoding="utf-8")
    (tmp_path / "dir.txt").mkdir()
    docs = documents_from_folder(tmp_path)
    assert [(d.id, d.path, d.text) for d in docs] == [
        ("a.txt", "a.txt", "alpha\n"),
        ("notes/b.md", "notes/b.md", "# B ü"),
        ("notes/deep/c.txt", "notes/deep/c.txt", ""),
    ]
    assert [d.id for d in documents_from_folder(tmp_path, patterns=("*.md",))] == ["notes/b.md"]
    ws = Workspace.from_documents(docs)
    assert ws.by_path("notes/deep").kind == "directory" and ws.get("notes/b.md").text == "# B ü"


def test_import_errors_name_the_file(tmp_path, monkeypatch):
    with pytest.raises(WorkspaceError, match="is not a folder"):
        documents_from_folder(tmp_path / "missing")
    with pytest.raises(WorkspaceError, match="patterns must be non-empty glob strings"):
        documents_from_folder(tmp_path, patterns=())
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café".encode("latin-1"))
    with pytest.raises(WorkspaceError, match=r"latin1.txt is not UTF-8 text \(byte 3\)"):
        documents_from_folder(tmp_path)
    bad.unlink()
    (tmp_path / "locked.txt").write_text("x", encoding="utf-8")

    def deny(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", deny)
    with pytest.raises(WorkspaceError, match="cannot read .*locked.txt: Permission denied"):
        documents_from_folder(tmp_path)


# --- export ----------------------------------------------------------------------------------


def test_export_writes_a_walkable_tree(tmp_path, curated):
    out = export_folder(curated, tmp_path / "out")
    files = tree_of(out)
    assert sorted(files) == [
        "people/README.md",
        "people/friends.md/README.md",
        "people/friends.md/alice.md",
        "people/friends.md/bob.md",
        "raw/README.md",
        "raw/f1.txt", "raw/f2.txt", "raw/f3.txt", "raw/f4.txt", "raw/f5.txt",
    ]
    assert files["people/friends.md/README.md"] == (
        "---\nid: n4\nkind: synthetic\nlinks: [n2, n3, f4]\nprovenance: []\n---\nAlice and Bob are friends."
    )
    assert files["people/friends.md/alice.md"] == (
        "---\nid: n2\nkind: synthetic\nlinks: []\nprovenance: [f1, f2]\n---\nAlice: arborist.\n"
    )
    by_id = {}
    for content in files.values():
        meta, text = split_front_matter(content)
        by_id[meta["id"]] = (meta, text)
    assert set(by_id) == {n.id for n in curated}
    for node in curated:
        meta, text = by_id[node.id]
        assert (text, meta["kind"], tuple(meta["links"]), tuple(meta["provenance"])) == (
            node.text, node.kind, node.links, node.provenance)
    assert not [p for p in os.listdir(tmp_path) if p != "out"]  # no temporary folders left


def test_export_of_a_snapshot_equals_export_of_the_workspace(tmp_path, curated):
    export_folder(curated, tmp_path / "a")
    export_folder(SnapshotView.from_nodes(*curated.state()), tmp_path / "b")
    assert tree_of(tmp_path / "a") == tree_of(tmp_path / "b")


def test_export_refuses_non_empty_folder_unless_overwrite(tmp_path, curated):
    target = tmp_path / "out"
    target.mkdir()
    export_folder(curated, target)  # an empty folder is fine
    (target / "stray.txt").write_text("keep?", encoding="utf-8")
    with pytest.raises(WorkspaceError, match="is not empty; pass overwrite=True"):
        export_folder(curated, target)
    assert (target / "stray.txt").exists()
    export_folder(curated, target, overwrite=True)
    assert not (target / "stray.txt").exists() and (target / "raw" / "f1.txt").exists()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(WorkspaceError, match="exists and is not a folder"):
        export_folder(curated, tmp_path / "file")
    assert sorted(os.listdir(tmp_path)) == ["file", "out"]


def test_failed_export_leaves_the_old_tree_and_no_temporaries(tmp_path, curated):
    target = export_folder(curated, tmp_path / "out")
    before = tree_of(target)
    broken = ListSource([Node("a", "a.md", "synthetic", "fine"), Node("b", "b.md", "synthetic", "bad \ud800")])
    with pytest.raises(WorkspaceError, match=r"node 'b' \(b.md\) has text that is not valid Unicode"):
        export_folder(broken, target, overwrite=True)
    assert tree_of(target) == before
    assert os.listdir(tmp_path) == ["out"]
    unsafe = ListSource([Node("x", "a/../../escape", "synthetic", "")])
    with pytest.raises(WorkspaceError, match="cannot be written as a file"):
        export_folder(unsafe, tmp_path / "other")
    assert os.listdir(tmp_path) == ["out"]


def test_readme_name_collision_keeps_both(tmp_path):
    src = ListSource([
        Node("d", "docs", "directory", "folder readme"),
        Node("r", "docs/README.md", "raw", "a raw README document"),
    ])
    files = tree_of(export_folder(src, tmp_path / "out"))
    assert split_front_matter(files["docs/README-1.md"]) == ({"id": "d", "kind": "directory", "links": [], "provenance": []}, "folder readme")
    assert split_front_matter(files["docs/README.md"])[1] == "a raw README document"


def test_front_matter_round_trip_and_plain_text():
    node = Node("id: odd", "p", "synthetic", "---\nnot front matter\n---\n", links=("a b", "ü"), provenance=("x",))
    meta, text = split_front_matter(front_matter(node) + node.text)
    assert meta == {"id": "id: odd", "kind": "synthetic", "links": ["a b", "ü"], "provenance": ["x"]}
    assert text == node.text
    assert split_front_matter("plain text") == ({}, "plain text")
    assert split_front_matter("---\nunterminated") == ({}, "---\nunterminated")
