"""Agent views: exact text formats, costs and errors, on the live Workspace and on a SnapshotView."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.workspace import (
    CreateFile,
    Document,
    Link,
    MakeDir,
    MergeFiles,
    Workspace,
    WorkspaceError,
    codec,
    views,
)
from librarian.workspace.snapshot_view import SnapshotView


@pytest.fixture
def curated(ws: Workspace) -> Workspace:
    ws.apply(MakeDir("people", "People in the corpus.\nOne file per person."))
    ws.apply(CreateFile("people/alice.md", "Alice Johnson: arborist.\nLives in Dorringham.", ("f1", "f2")))
    ws.apply(CreateFile("people/bob.md", "Bob Smith: baker.", ("f3",)))
    ws.apply(MergeFiles(("people/alice.md", "people/bob.md"), "people/friends.md", "Alice and Bob are friends."))
    ws.apply(Link("people/friends.md", "f4"))
    ws.apply(MakeDir("empty"))
    return ws


@pytest.fixture(params=["workspace", "snapshot"])
def src(request, curated):
    if request.param == "workspace":
        return curated
    return SnapshotView.from_ipc_bytes(codec.to_ipc_bytes(*curated.state()))


def test_ls_root(src):
    result = views.ls(src)
    assert result.text == (
        "ls /: 3 entries\n"
        "  empty/  directory  0 entries\n"
        "  people/  directory  1 entry\n"
        "  raw/  directory  5 entries"
    )
    assert result.cost == views.ViewCost(len(result.text), -(-len(result.text) // 4), (), 0, 0)


def test_ls_folder_and_merged_file(src):
    assert views.ls(src, "people").text == "ls people: 1 entry\n  friends.md/  synthetic  26 chars, 2 entries"
    assert views.ls(src, "./people/friends.md/").text == (
        "ls people/friends.md: 2 entries\n  alice.md  synthetic  45 chars\n  bob.md  synthetic  17 chars"
    )
    assert views.ls(src, "empty").text == "ls empty: 0 entries"


def test_read_lines_format_and_cost(src):
    result = views.read(src, "people/friends.md")
    assert result.text == (
        "[synthetic] people/friends.md  id=n4  lines 1-1 of 1\n"
        "links: n2, n3, f4\n"
        "---\n"
        "Alice and Bob are friends."
    )
    assert result.cost.nodes_touched == ("n4",)
    assert (result.cost.raw_touched, result.cost.synthetic_touched) == (0, 1)
    assert result.cost.chars == len(result.text) and result.cost.est_tokens == -(-len(result.text) // 4)


def test_read_by_id_with_a_line_range(src):
    assert views.read(src, "n2", start_line=2, num_lines=1).text == (
        "[synthetic] people/friends.md/alice.md  id=n2  lines 2-2 of 2\nprovenance: f1, f2\n---\nLives in Dorringham."
    )
    assert views.read(src, "n2", start_line=1, num_lines=99).text.endswith(
        "lines 1-2 of 2\nprovenance: f1, f2\n---\nAlice Johnson: arborist.\nLives in Dorringham."
    )
    raw = views.read(src, "raw/f1.txt")
    assert raw.cost.raw_touched == 1 and raw.cost.synthetic_touched == 0


def test_read_empty_text(src):
    assert views.read(src, "empty").text == "[directory] empty  id=n5  lines 0-0 of 0\n---"


def test_read_kbgym_appends_every_linked_node(src):
    result = views.read(src, "people/friends.md", mode="kbgym")
    assert result.text == (
        "[synthetic] people/friends.md  id=n4  lines 1-1 of 1\n"
        "links: n2, n3, f4\n"
        "---\n"
        "Alice and Bob are friends.\n"
        "\n"
        "=== linked: [synthetic] people/friends.md/alice.md  id=n2 ===\n"
        "Alice Johnson: arborist.\nLives in Dorringham.\n"
        "\n"
        "=== linked: [synthetic] people/friends.md/bob.md  id=n3 ===\n"
        "Bob Smith: baker.\n"
        "\n"
        "=== linked: [raw] raw/f4.txt  id=f4 ===\n"
        "Bob Smith is a friend of Alice Johnson."
    )
    assert result.cost.nodes_touched == ("n4", "n2", "n3", "f4")
    assert (result.cost.raw_touched, result.cost.synthetic_touched) == (1, 3)


def test_open_shows_readme_then_listing(src):
    result = views.open(src, "people")
    assert result.text == (
        "README of people:\nPeople in the corpus.\nOne file per person.\n\n"
        "ls people: 1 entry\n  friends.md/  synthetic  26 chars, 2 entries"
    )
    assert result.cost.nodes_touched == ("n1",)
    root = views.open(src)
    assert root.text.startswith("README of /:\n(no README)\n\nls /: 3 entries\n")
    assert root.cost.nodes_touched == ()


def test_tree_full_and_limited(src):
    assert views.tree(src).text == (
        "/\n  empty/\n  people/\n    friends.md/\n      alice.md\n      bob.md\n"
        "  raw/\n    f1.txt\n    f2.txt\n    f3.txt\n    f4.txt\n    f5.txt"
    )
    assert views.tree(src, "people", max_depth=1).text == "people\n  friends.md/ (2 entries not shown)"
    assert views.tree(src, max_depth=2).text.splitlines()[3] == "    friends.md/ (2 entries not shown)"


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda s: views.read(s, "nowhere.md"), "no file at 'nowhere.md'; use ls"),
        (lambda s: views.read(s, 42), "expected a path or id string, got int"),
        (lambda s: views.read(s, "n2", start_line=0), "start_line must be 1 or more"),
        (lambda s: views.read(s, "n2", start_line=3), "start_line 3 is past the end of 'people/friends.md/alice.md', which has 2 lines"),
        (lambda s: views.read(s, "n2", start_line="1"), "start_line must be an integer"),
        (lambda s: views.read(s, "n2", start_line=True), "start_line must be an integer"),
        (lambda s: views.read(s, "n2", num_lines=0), "num_lines must be 1 or more"),
        (lambda s: views.read(s, "n2", mode="all"), "read mode must be 'lines' or 'kbgym'"),
        (lambda s: views.read(s, "empty", start_line=2), "past the end"),
        (lambda s: views.ls(s, "ghost"), "no file or folder at 'ghost'; use ls('')"),
        (lambda s: views.ls(s, "raw/f1.txt"), "is a file with nothing under it; use read('raw/f1.txt')"),
        (lambda s: views.ls(s, "../etc"), "contains '..'"),
        (lambda s: views.ls(s, "/abs"), "is absolute"),
        (lambda s: views.open(s, "raw/f1.txt"), "use read"),
        (lambda s: views.tree(s, max_depth=0), "max_depth must be 1 or more"),
        (lambda s: views.tree(s, "ghost"), "no file or folder"),
    ],
)
def test_bad_requests_raise_actionable_errors(src, call, needle):
    with pytest.raises(WorkspaceError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        call(src)


def test_views_agree_between_workspace_and_snapshot(curated):
    snap = SnapshotView.from_nodes(*curated.state())
    for node in curated:
        assert views.read(curated, node.id, mode="kbgym") == views.read(snap, node.id, mode="kbgym")
        if curated.children(node.path) or node.kind == "directory":
            assert views.open(curated, node.path) == views.open(snap, node.path)
    assert views.tree(curated) == views.tree(snap)


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200), start=st.integers(-3, 30), count=st.none() | st.integers(-2, 30))
def test_property_read_range_is_a_slice_or_a_workspace_error(text, start, count):
    ws = Workspace.from_documents([Document("f", text, path="f.md")])
    try:
        result = views.read(ws, "f.md", start_line=start, num_lines=count)
    except WorkspaceError:
        lines = text.splitlines()
        assert start < 1 or (count is not None and count < 1) or start > max(len(lines), 1)
        return
    body = result.text.split("\n---", 1)[1]
    lines = text.splitlines()
    expected = lines[start - 1 : None if count is None else start - 1 + count]
    assert body == "".join("\n" + line for line in expected)
    assert result.cost.est_tokens * 4 >= result.cost.chars > (result.cost.est_tokens - 1) * 4
