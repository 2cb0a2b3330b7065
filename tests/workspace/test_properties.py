"""Property tests: random op sequences keep the invariants, and replay equals the live state."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
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
    NearDuplicateGuard,
    Unlink,
    Workspace,
    WorkspaceError,
    op_from_dict,
    replay,
)
from librarian.workspace.invariants import invariant_violations

NAMES = st.sampled_from(["a", "b", "c", "notes", "x.md", "y.md", "idx", "ü", "d e"])
PATHS = st.lists(NAMES, min_size=1, max_size=3).map("/".join) | st.sampled_from(["", "../x", "/abs", "a//b", "a/./b"])
TEXTS = st.text(max_size=30) | st.sampled_from(["Alice Johnson", "fact 1", "fact 2 about Bob"])


def _ref(data, ws: Workspace):
    ids = sorted(n.id for n in ws.all_nodes())
    paths = sorted(n.path for n in ws)
    return data.draw(st.sampled_from(ids + paths + ["ghost", "", "../up"]))


def _op(data, ws: Workspace):
    kind = data.draw(st.sampled_from(["add", "edit", "delete", "link", "link_many", "unlink", "move", "add_document",
                                      "make_dir", "create_file", "merge_files"]))
    ref = lambda: _ref(data, ws)  # noqa: E731
    refs = lambda hi: tuple(ref() for _ in range(data.draw(st.integers(0, hi))))  # noqa: E731
    match kind:
        case "add":
            return Add(data.draw(TEXTS), data.draw(st.none() | PATHS), refs(3), refs(2))
        case "edit":
            return Edit(ref(), data.draw(TEXTS))
        case "delete":
            return Delete(ref())
        case "link":
            return Link(ref(), ref())
        case "link_many":
            return LinkMany(ref(), refs(5))
        case "unlink":
            return Unlink(ref(), ref())
        case "move":
            return Move(ref(), data.draw(PATHS))
        case "add_document":
            return AddDocument(data.draw(st.sampled_from(["s1", "s2", "f1", "n3"])), data.draw(TEXTS), data.draw(st.none() | PATHS))
        case "make_dir":
            return MakeDir(data.draw(PATHS), data.draw(TEXTS))
        case "create_file":
            return CreateFile(data.draw(PATHS), data.draw(TEXTS), refs(3))
        case _:
            return MergeFiles(refs(3), data.draw(PATHS), data.draw(TEXTS))


def _initial(policy: str) -> Workspace:
    docs = [Document(f"f{i}", f"fact {i} about {name}", path=f"raw/f{i}.txt")
            for i, name in enumerate(["Alice", "Bob", "Carol", "Dan"])]
    return Workspace.from_documents(docs, raw_policy=policy, guard=NearDuplicateGuard(threshold=0.8))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), policy=st.sampled_from(["immutable", "editable"]), n_ops=st.integers(1, 25))
def test_random_op_sequences_keep_invariants_and_replay(data, policy: str, n_ops: int) -> None:
    ws = _initial(policy)
    initial = ws.copy()
    raw_before = {n.id: n for n in ws if n.kind == "raw"}
    for _ in range(n_ops):
        op = _op(data, ws)
        before = ws.state()
        version = ws.version
        try:
            ws.apply(op)
            event(f"applied {op.name}")
        except WorkspaceError:
            assert ws.state() == before and ws.version == version, f"rejected {op} changed the store"
        assert invariant_violations(*ws.state()) == []
    if policy == "immutable":
        assert {i: ws.get(i) for i in raw_before} == raw_before
    assert replay(initial, ws.trace).state() == ws.state()
    changes = ws.changes_since(0)
    assert changes.upserted.isdisjoint(changes.deleted)
    assert all(ws.get(i) is not None for i in changes.upserted)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(payload=st.fixed_dictionaries({"op": st.sampled_from(
    ["add", "edit", "delete", "link", "link_many", "unlink", "move", "make_dir", "create_file", "merge_files",
     "add_document", "rm"]
)}, optional={k: JSON | st.text() for k in
              ["text", "target", "source", "targets", "path", "new_path", "links", "sources", "children", "readme", "id",
               "origin", "x"]}))
def test_malformed_payloads_raise_only_the_documented_error(payload) -> None:
    ws = _initial("editable")
    before = ws.state()
    try:
        ws.apply(op_from_dict(payload))
    except WorkspaceError:
        assert ws.state() == before
    assert invariant_violations(*ws.state()) == []


@given(chunk=st.text(min_size=1, max_size=5), extra=st.integers(1, 50))
@settings(max_examples=10, deadline=None)
def test_huge_text_is_rejected(chunk: str, extra: int) -> None:
    ws = _initial("editable")
    text = (chunk * (100_000 // len(chunk) + 1))[:100_000] + "x" * extra
    before = ws.state()
    try:
        ws.apply(Add(text))
    except WorkspaceError as exc:
        assert "limit" in str(exc) and ws.state() == before
    else:
        raise AssertionError("a text over the limit was accepted")
