"""Each tool against a real workspace and a real (BM25) index: text, cost, errors as observations."""

from __future__ import annotations

import pytest

from librarian.roles import ROLES, TOOLS, ToolContext, get_tools
from librarian.roles.curator_tools import content_path
from librarian.roles.tools import run_tool
from librarian.workspace import Document, Workspace
from librarian.workspace.snapshot_view import SnapshotView

from .conftest import make_context


def run(ctx, key, **args):
    return run_tool(TOOLS[key], ctx, args)


def test_every_role_gets_exactly_the_tools_that_name_it():
    for name, make in ROLES.items():
        role = make()
        tools = get_tools(role.tools)
        assert {t.key for t in tools.values()} == {k for k, t in TOOLS.items() if name in t.roles}
        assert role.answer_tool in tools
        for tool in tools.values():
            schema = tool.schema()
            assert schema["type"] == "function" and schema["function"]["name"] == tool.name
            assert schema["function"]["parameters"]["additionalProperties"] is False


def test_search_pages_five_hits_one_action_each(ctx):
    first = run(ctx, "kbgym.search", query="lives in Dorringham")
    lines = first.text.splitlines()
    assert lines[0] == 'search "lives in Dorringham" page 1: 5 hits (more on page 2)'
    assert [ln.split()[0] for ln in lines[1::2]] == ["1.", "2.", "3.", "4.", "5."]
    assert first.actions == 1 and len(first.nodes_touched) == 5 and first.raw_touched == 5
    second = run(ctx, "kbgym.search", query="lives in Dorringham", page=2)
    assert "page 2: 1 hit (no more pages)" in second.text
    assert not set(first.nodes_touched) & set(second.nodes_touched)
    assert run(ctx, "kbgym.search", query="zeppelin").text == 'search "zeppelin" page 1: no hits'


@pytest.mark.parametrize(("query", "shown"), [("Dorringham\x1b[2J\x1b[31m", "Dorringham\\x1b[2J\\x1b[31m"),
                                            ("Dorringham \ud83d", "Dorringham \\ud83d"),
                                            ("Dorringham\u202e", "Dorringham\\u202e")])
def test_a_search_query_is_echoed_escaped(ctx, query, shown):
    text = run(ctx, "kbgym.search", query=query).text
    assert text.startswith(f'search "{shown}" page 1')
    assert not any(ch in text for ch in "\x1b\ud83d\u202e")
    text.encode("utf-8")  # no lone surrogate reaches the model's context


def test_search_without_an_index_is_an_error_observation():
    bare = ToolContext(make_context().workspace)
    result = run(bare, "kbgym.search", query="x")
    assert not result.ok and result.actions == 1 and "no search index" in result.text


def test_read_shows_linked_documents_one_level(ctx):
    assert run(ctx, "kbgym.link_many", source="f2", targets=["f6", "f7"]).ok
    assert run(ctx, "kbgym.link", source="f6", target="f1").ok
    result = run(ctx, "kbgym.read", id="f2")
    assert result.text.startswith("[raw] facts/f2  id=f2")
    assert "links: f6, f7" in result.text and "Carol Lee lives in Dorringham." in result.text
    assert "Alice Johnson's job" not in result.text  # f6's own link is two levels away
    assert result.nodes_touched == ("f2", "f6", "f7") and result.chars == len(result.text)
    assert result.est_tokens == -(-len(result.text) // 4)


def test_curator_edits_apply_and_the_index_follows(ctx):
    added = run(ctx, "kbgym.add", text="Residents of Dorringham", links=["f2", "f6"])
    assert added.ok and added.changed and added.text.startswith("added ")
    new_id = added.text.split("'")[1]
    hits = run(ctx, "kbgym.search", query="Residents").text
    assert f"id={new_id}" in hits
    assert run(ctx, "kbgym.edit", id=new_id, text="People living in Dorringham").ok
    assert f"id={new_id}" in run(ctx, "kbgym.search", query="living").text
    assert run(ctx, "kbgym.unlink", source=new_id, target="f6").ok
    assert run(ctx, "kbgym.delete", id=new_id).ok
    assert f"id={new_id}" not in run(ctx, "kbgym.search", query="living").text
    assert run(ctx, "kbgym.done").terminal


def test_added_documents_are_named_after_their_text(ctx):
    first = run(ctx, "kbgym.add", text="People who live in Dorringham", links=["f2"])
    assert first.ok and first.text.endswith("at 'people-who-live-in-dorringham'")
    node = ctx.workspace.by_path("people-who-live-in-dorringham")
    assert node is not None and node.id == first.text.split("'")[1] and node.links == ("f2",)
    assert content_path(ctx.workspace, "People who live in Dorringham?") == "people-who-live-in-dorringham-2"
    long = run(ctx, "kbgym.add", text="Everyone " + "whose neighbour owns a very long boat " * 5)
    assert len(long.text.split("at '")[1].rstrip("'")) <= 60


def test_rejected_ops_become_observations_and_change_nothing(ctx):
    before = ctx.workspace.state()
    too_many = run(ctx, "kbgym.link_many", source="f1", targets=[f"x{i}" for i in range(41)])
    assert not too_many.ok and too_many.actions == 1 and "at most 40 targets" in too_many.text
    missing = run(ctx, "kbgym.link", source="f1", target="nope")
    assert not missing.ok and missing.text.startswith("error (link): ")
    assert ctx.workspace.state() == before


def test_editing_a_frozen_snapshot_is_refused(ctx):
    frozen = ToolContext(SnapshotView.from_nodes(*ctx.workspace.state()))
    result = run(frozen, "kbgym.add", text="x")
    assert not result.ok and "frozen snapshot" in result.text
    assert run(frozen, "kbgym.read", id="f1").ok


def _library() -> ToolContext:
    ws = Workspace.from_documents([Document("r1", "line one\nline two\nline three", path="raw/a.txt"),
                                   Document("r2", "other", path="raw/b.txt")])
    ctx = ToolContext(ws)
    assert run(ctx, "builder.create_file", path="notes/a.md", text="summary of a\nsecond", sources=["r1"]).ok
    return ctx


def test_answerer_list_read_with_line_ranges_and_answer():
    ctx = _library()
    listing = run(ctx, "fs.list", path="")
    assert listing.text.splitlines()[0] == "ls /: 2 entries" and listing.nodes_touched == ()
    part = run(ctx, "fs.read", path="raw/a.txt", start_line=2, num_lines=1)
    assert "lines 2-2 of 3" in part.text and part.text.endswith("line two") and part.raw_touched == 1
    bad = run(ctx, "fs.read", path="raw/a.txt", start_line=9)
    assert not bad.ok and "past the end" in bad.text
    done = run(ctx, "answer", text="two")
    assert done.terminal and done.answer == "two"


def test_synthetic_only_view_with_and_without_raw_fallback():
    ctx = _library()
    ctx.answer_view = "synthetic"
    assert run(ctx, "fs.list", path="raw").text == "ls raw: 0 entries"
    assert run(ctx, "fs.read", path="notes/a.md").synthetic_touched == 1
    assert not run(ctx, "fs.read", path="raw/a.txt").ok
    ctx.answer_view = "synthetic+raw_fallback"
    assert run(ctx, "fs.read", path="r1").raw_touched == 1
    assert run(ctx, "fs.list", path="raw").text == "ls raw: 0 entries"


def test_builder_merge_delete_stop():
    ctx = _library()
    assert run(ctx, "builder.create_file", path="notes/b.md", text="about b", sources=["r2"]).ok
    merged = run(ctx, "builder.merge_files", children=["notes/a.md", "notes/b.md"], path="notes/all.md",
                 text="everything")
    assert merged.ok and ctx.workspace.by_path("notes/all.md/a.md") is not None
    assert not run(ctx, "builder.delete", path="raw/b.txt").ok  # raw documents are immutable here
    assert run(ctx, "builder.delete", path="notes/all.md/b.md").ok
    assert run(ctx, "builder.stop").terminal


@pytest.mark.parametrize("key", sorted(TOOLS))
def test_every_tool_costs_its_declared_actions_even_on_error(key):
    ctx = make_context()
    tool = TOOLS[key]
    result = run_tool(tool, ctx, {"id": "missing", "path": "missing", "source": "missing", "target": "missing",
                                  "targets": ["missing"], "children": ["missing"], "text": "t", "sources": ["missing"],
                                  "query": "q"} if tool.parameters["properties"] else {})
    assert result.actions == tool.cost == 1
