"""The near-duplicate guard, the trace's Arrow form, and replay."""

from __future__ import annotations

import pyarrow as pa
import pytest

from librarian.workspace import (
    Add,
    Edit,
    Link,
    NearDuplicateGuard,
    SnapshotFormatError,
    Workspace,
    WorkspaceError,
    read_trace,
    replay,
    write_trace,
)
from librarian.workspace.dedup import jaccard
from librarian.workspace.trace import trace_from_table, trace_to_table

from .conftest import FACTS


def _judge_calls() -> tuple[list[str], NearDuplicateGuard]:
    calls: list[str] = []

    def judge(text, node):
        calls.append(node.id)
        return "Alice" in text

    return calls, NearDuplicateGuard(judge=judge, threshold=0.6)


def test_jaccard_is_symmetric_and_bounded() -> None:
    assert jaccard("a b c", "c b a") == 1.0
    assert jaccard("a b", "c d") == 0.0
    assert jaccard("a b", "b c") == jaccard("b c", "a b") == pytest.approx(1 / 3)


def test_duplicate_add_is_merged_and_verdict_recorded(kb: Workspace) -> None:
    calls, guard = _judge_calls()
    kb.guard = guard
    index = kb.apply(Add("Alice Johnson index page", links=("f1",))).created[0]
    result = kb.apply(Add("Alice Johnson index page", links=("f2",)))
    assert result.created == () and result.merged_into == index
    assert kb.get(index).links == ("f1", "f2")
    assert kb.trace[-1].verdicts[0].candidate == index and kb.trace[-1].verdicts[0].duplicate
    assert calls  # the judge was consulted
    # a candidate the judge rejects is recorded too, and the add goes ahead
    result = kb.apply(Add("Bob Smith's job is baker"))
    assert result.created and result.verdicts and not result.verdicts[0].duplicate


def test_duplicate_edit_folds_the_origin_into_the_survivor(kb: Workspace) -> None:
    kb.guard = NearDuplicateGuard(threshold=0.99)
    hub = kb.apply(Add("hub", links=("f1",))).created[0]
    result = kb.apply(Edit("f2", FACTS[0][1]))  # f2 now says exactly what f1 says
    assert result.merged_into == "f1" and result.deleted == ("f2",)
    assert kb.get("f1").absorbed == ("f2",) and kb.get("f2") is None
    assert kb.get(hub).links == ("f1",)


def test_replay_uses_recorded_verdicts_without_calling_the_judge(kb: Workspace) -> None:
    initial = kb.copy()
    calls, guard = _judge_calls()
    kb.guard = guard
    a = kb.apply(Add("Alice Johnson index page", links=("f1",))).created[0]
    kb.apply(Add("Alice Johnson index page", links=("f3",)))
    kb.apply(Link(a, "f2"))
    n_calls = len(calls)
    rebuilt = replay(initial, kb.trace)
    assert len(calls) == n_calls
    assert rebuilt.state() == kb.state()


def test_trace_round_trips_through_arrow_and_parquet(kb: Workspace, tmp_path) -> None:
    kb.guard = NearDuplicateGuard(threshold=0.5)
    initial = kb.copy()
    kb.apply(Add("Caröl Lee — astronomy ✨", links=("f5",)))
    kb.apply(Edit("f3", FACTS[2][1] + " Also pastry."))
    assert trace_from_table(trace_to_table(kb.trace)) == kb.trace
    write_trace(kb.trace, tmp_path / "trace.parquet")
    loaded = read_trace(tmp_path / "trace.parquet")
    assert loaded == kb.trace
    assert replay(initial, loaded).state() == kb.state()


def test_corrupt_or_foreign_trace_files_fail_clearly(tmp_path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(SnapshotFormatError, match="bad.parquet"):
        read_trace(bad)
    table = trace_to_table([]).replace_schema_metadata({b"librarian.kind": b"trace", b"librarian.schema_version": b"99"})
    with pytest.raises(SnapshotFormatError, match="version '99'"):
        trace_from_table(table)
    with pytest.raises(SnapshotFormatError, match="not a librarian trace"):
        trace_from_table(pa.table({"x": [1]}))


def test_replay_over_the_wrong_initial_state_names_the_step(kb: Workspace, ws: Workspace) -> None:
    kb.apply(Edit("f1", "edited"))
    with pytest.raises(WorkspaceError, match="step 1"):
        replay(ws, kb.trace)  # ws keeps raw nodes immutable, so the edit cannot replay
