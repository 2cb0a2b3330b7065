"""Hardening of the op boundary: text that cannot be saved or would drive a terminal, malformed payloads, caps,
and taking an op back (issue: lone surrogates, control characters, `op` of the wrong type, unbounded `add` links)."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    Workspace,
    WorkspaceError,
    codec,
    op_from_dict,
    read_trace,
    replay,
    write_trace,
)
from librarian.workspace.invariants import invariant_violations
from librarian.workspace.ops import MAX_LINK_MANY_TARGETS
from librarian.workspace.text import terminal_safe

from .test_store_ops import assert_rejected


def _saves(ws: Workspace, tmp_path) -> None:
    """Everything a store is saved through still works."""
    ws.content_hash()
    codec.from_ipc_bytes(codec.table_to_ipc_bytes(ws.to_table()))
    write_trace(ws.trace, tmp_path / "trace.parquet")
    codec.write_parquet(*ws.state(), tmp_path / "snap.parquet")


@pytest.mark.parametrize("op", [
    Add("smile \ud83d"),
    Add("fine", path="notes/\udc00x"),
    Edit("notes/a", "broken \udfff"),
    MakeDir("dir", readme="readme \ud800"),
    CreateFile("made", "half \ud83d", ("f1",)),
    MergeFiles(("notes/a",), "merged", "text \ud83d"),
    AddDocument("s9", "session \ud83d"),
    AddDocument("s9", "session", origin="orig\ud83d"),
    Link("notes/a", "f1\ud83d"),
])
def test_lone_surrogates_are_refused_and_the_store_still_saves(ws: Workspace, tmp_path, op) -> None:
    ws.apply(Add("note a", path="notes/a"))
    assert_rejected(ws, op, "lone surrogate")
    _saves(ws, tmp_path)
    ws.apply(Add("smile \U0001f600 (the whole character is fine)"))
    _saves(ws, tmp_path)


@pytest.mark.parametrize("text", ["line\x07bell\x1b[31mred", "back\x08space", "nul\x00", "c1 \x9b31m", "del\x7f",
                                  "rewrite\rline", "form\x0cfeed"])
def test_control_characters_in_text_are_refused(ws: Workspace, text: str) -> None:
    assert_rejected(ws, Add(text), "control character")
    assert_rejected(ws, MakeDir("d", readme=text), "control character")
    assert_rejected(ws, AddDocument("s1", text), "control character")


INVISIBLE = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200b",
             "\u200c", "\u200d", "\ufeff"]


@pytest.mark.parametrize("ch", INVISIBLE)
def test_invisible_format_characters_are_refused_like_control_characters(ws: Workspace, ch: str) -> None:
    code = f"U+{ord(ch):04X}"
    for op in (Add(f"pay{ch}moc.evil"), MakeDir("d", readme=f"readme{ch}"), AddDocument("s1", f"{ch}session"),
               Add("fine", path=f"notes/a{ch}b")):
        assert_rejected(ws, op, re.escape(f"invisible format character {code} ("))
    ws.apply(Add("note", path="notes/a"))
    assert_rejected(ws, Edit("notes/a", f"changed{ch}"), re.escape(code))
    assert ch not in "".join(n.text + n.path for n in ws)


def test_newlines_tabs_and_crlf_are_kept(ws: Workspace) -> None:
    text = "line one\r\nline two\n\tindented"
    node = ws.get(ws.apply(Add(text)).created[0])
    assert node.text == text


@pytest.mark.parametrize("field", ["path", "target", "origin"])
def test_control_characters_in_names_are_refused(ws: Workspace, field: str) -> None:
    ws.apply(Add("note", path="notes/a"))
    op = {"path": Add("x", path="notes/\x1b[2Jb"), "target": Delete("notes/a\n"),
          "origin": AddDocument("s1", "session", origin="o\x1b]0;title\x07")}[field]
    assert_rejected(ws, op, "control character")


def test_raw_documents_with_lone_surrogates_are_refused_up_front() -> None:
    with pytest.raises(WorkspaceError, match=r"document 'd1': its text holds a lone surrogate at character 3"):
        Workspace.from_documents([Document("d0", "fine"), Document("d1", "bad\ud83d")])


@pytest.mark.parametrize("payload", [{"op": {"x": 1}}, {"op": ["add"]}, {"op": None}, {"op": 3}, {}])
def test_an_op_name_of_any_type_is_a_workspace_error(payload) -> None:
    with pytest.raises(WorkspaceError, match="'op' must be one of"):
        op_from_dict(payload)


def test_error_messages_do_not_echo_huge_or_unencodable_input() -> None:
    with pytest.raises(WorkspaceError) as caught:
        op_from_dict({"op": "x" * 100_000})
    assert len(str(caught.value)) < 400
    extra = {f"{'k' * 10_000}{i}": 1 for i in range(50)}
    with pytest.raises(WorkspaceError, match="and 46 more") as caught:
        op_from_dict({"op": "delete", "target": "a", **extra, "\ud83d": 2})
    message = str(caught.value)
    assert len(message) < 600
    message.encode("utf-8")  # no lone surrogate reaches a message


def test_add_takes_at_most_as_many_links_as_link_many(kb: Workspace) -> None:
    for i in range(6, 6 + MAX_LINK_MANY_TARGETS):
        kb.apply(Add(f"fact number {i}", path=f"facts/{i}"))
    targets = tuple(f"facts/{i}" for i in range(6, 6 + MAX_LINK_MANY_TARGETS)) + ("f1",)
    assert_rejected(kb, Add("too many", links=targets), f"at most {MAX_LINK_MANY_TARGETS} links, got 41")
    node = kb.get(kb.apply(Add("just enough", links=targets[:MAX_LINK_MANY_TARGETS])).created[0])
    assert len(node.links) == MAX_LINK_MANY_TARGETS


def test_terminal_safe_escapes_what_a_terminal_would_run() -> None:
    assert terminal_safe("plain\n\ttext\r\n") == "plain\n\ttext\r\n"
    shown = terminal_safe("a\x1b[31mred\x07 \x9b \ud83d x\ry")
    assert shown == "a\\x1b[31mred\\x07 \\x9b \\ud83d x\\ry"
    assert not any(ch in shown for ch in "\x1b\x07\x9b\r")
    io.TextIOWrapper(io.BytesIO(), encoding="utf-8").write(shown)  # printable on a UTF-8 terminal
    hidden = terminal_safe("user\u202egnp.exe \u200bzero\ufeff \u2066iso\u2069")
    assert hidden == "user\\u202egnp.exe \\u200bzero\\ufeff \\u2066iso\\u2069"
    assert terminal_safe("emoji \U0001f600 and accents é") == "emoji \U0001f600 and accents é"


# ----- taking an op back -----------------------------------------------------------------------------------------

def _ops() -> list:
    return [Add("Residents of Dorringham", path="idx/dorringham", links=("f2",)), MakeDir("topics/x/y", "deep"),
            Move("idx", "topics/x/y/idx"), Link("topics/x/y/idx/dorringham", "f1"),
            MergeFiles(("topics/x/y/idx/dorringham",), "topics/merged", "merged"),
            Edit("topics/merged", "merged, edited"), Delete("topics/x/y/idx"),
            LinkMany("topics/merged", ("f3", "f4")), AddDocument("s1", "new session", path="sessions/a/s1")]


@pytest.mark.parametrize("upto", range(len(_ops())))
def test_revert_last_restores_nodes_indexes_meta_and_trace(ws: Workspace, upto: int) -> None:
    ops = _ops()
    for op in ops[:upto]:
        ws.apply(op)
    before, trace = ws.state(), list(ws.trace)
    paths = {p: ws.by_path(p) for p in ("idx", "topics", "topics/x/y", "topics/merged", "sessions/a")}
    children = {p: [n.id for n in ws.children(p)] for p in ("", "raw", "topics", "topics/x/y")}
    referrers = {i: ws.referrer_ids(i) for i in ("f1", "f2", "f3")}
    ws.apply(ops[upto])
    ws.revert_last()
    assert ws.state() == before and ws.trace == trace and len(ws) == len(list(ws))
    assert {p: ws.by_path(p) for p in paths} == paths
    assert {p: [n.id for n in ws.children(p)] for p in children} == children
    assert {i: ws.referrer_ids(i) for i in referrers} == referrers
    with pytest.raises(WorkspaceError, match="no applied op to revert"):
        ws.revert_last()
    ws.apply(ops[upto])  # the same op applies again, to the same result
    assert invariant_violations(*ws.state()) == []


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(range(len(_ops()))), min_size=1, max_size=12))
def test_reverting_failed_saves_keeps_replay_exact(choices: list[int]) -> None:
    ws = Workspace.from_documents([Document(f"f{i}", f"fact {i}", path=f"raw/f{i}.txt") for i in range(1, 6)])
    initial = ws.copy()
    ops = _ops()
    for i, choice in enumerate(choices):
        try:
            ws.apply(ops[choice])
        except WorkspaceError:
            continue
        if i % 2:  # every other applied op "failed to save" and was taken back
            ws.revert_last()
    assert replay(initial, ws.trace).state() == ws.state()
    assert invariant_violations(*ws.state()) == []


def test_write_trace_leaves_no_partial_file(tmp_path, ws: Workspace) -> None:
    ws.apply(Add("kept"))
    write_trace(ws.trace, tmp_path / "t.parquet")
    ws.trace[0].op["text"] = "smuggled \ud83d"  # what a corrupt in-memory entry would do
    with pytest.raises(WorkspaceError, match="cannot be encoded"):
        write_trace(ws.trace, tmp_path / "t.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]
    assert read_trace(tmp_path / "t.parquet")[0].op["text"] == "kept"
