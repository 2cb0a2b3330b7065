"""Structure statistics: exact values on hand-built stores, and properties on random ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.workspace import CreateFile, Link, MakeDir, MergeFiles, Node, SnapshotMeta, Workspace
from librarian.workspace.snapshot_view import SnapshotView
from librarian.workspace.stats import StructureStats, count_clusters, coverage, depth, structure_stats


def hand_built() -> list[Node]:
    return [
        *(Node(f"r{i}", f"raw/r{i}", "raw", f"fact {i}", flag="untouched") for i in range(1, 6)),
        Node("d", "raw", "directory", ""),
        Node("r3x", "raw/r3", "raw", "", deleted_step=2),  # a tombstone: ignored
        Node("s1", "idx", "synthetic", "index", links=("s2",)),
        Node("s2", "idx/child", "synthetic", "child", provenance=("r1",)),
        Node("s3", "hub", "synthetic", "hub", links=("r2", "r3")),
        Node("s4", "dead", "synthetic", "gone", links=("r5",), deleted_step=3),
    ]


def with_r3_link(nodes: list[Node]) -> list[Node]:
    """r3 links r4, so r4 is two hops from s3."""
    return [Node("r3", "raw/r3", "raw", "fact 3", links=("r4",)) if n.id == "r3" else n for n in nodes]


def test_exact_values_on_a_hand_built_store():
    stats = structure_stats(SnapshotView.from_nodes(with_r3_link(hand_built()), SnapshotMeta()))
    assert stats == StructureStats(
        active_nodes=9,
        raw=5,
        synthetic=3,
        directories=1,
        clusters=2,
        merges=1,
        max_depth=2,
        mean_depth=pytest.approx((5 * 2 + 1 + 1 + 2 + 1) / 9),
        total_links=4,
        total_provenance=1,
        index_out_degrees=(1, 2),
        out_degree_median=1.5,
        out_degree_mean=1.5,
        out_degree_max=2,
        empty_indexes=1,
        coverage_one_hop=pytest.approx(3 / 5),
        coverage_two_hop=pytest.approx(4 / 5),
    )
    assert stats.as_dict()["index_out_degrees"] == [1, 2]


def test_stats_of_a_curated_workspace(ws: Workspace):
    ws.apply(MakeDir("people", "People."))
    ws.apply(CreateFile("people/alice.md", "Alice.", ("f1", "f2")))
    ws.apply(CreateFile("people/bob.md", "Bob.", ("f3",)))
    ws.apply(MergeFiles(("people/alice.md", "people/bob.md"), "people/friends.md", "Friends."))
    ws.apply(Link("people/friends.md", "f4"))
    ws.apply(CreateFile("solo.md", "About Alice.", ("people/friends.md/alice.md",)))
    stats = structure_stats(ws)
    assert (stats.synthetic, stats.clusters, stats.merges, stats.max_depth) == (4, 1, 1, 3)
    assert (stats.index_out_degrees, stats.empty_indexes) == ((3,), 3)
    assert (stats.coverage_one_hop, stats.coverage_two_hop) == (4 / 5, 4 / 5)
    assert structure_stats(SnapshotView.from_nodes(*ws.state())) == stats


def test_empty_store():
    stats = structure_stats(SnapshotView.from_nodes([], SnapshotMeta()))
    assert (stats.active_nodes, stats.clusters, stats.coverage_one_hop, stats.out_degree_median) == (0, 0, 0.0, 0.0)


def test_helpers():
    assert (depth(""), depth("a"), depth("a/b/c")) == (0, 1, 3)
    lone = [Node("a", "a", "synthetic", ""), Node("b", "b", "synthetic", "", links=("a", "zz"))]
    assert count_clusters(lone) == 1
    assert count_clusters(lone[:1]) == 1
    assert coverage([Node("s", "s", "synthetic", "", links=("r",))]) == (0.0, 0.0)  # no raw nodes


# --- properties on random stores ---------------------------------------------------------------


@st.composite
def stores(draw):
    n_raw = draw(st.integers(0, 8))
    n_syn = draw(st.integers(0, 8))
    raw_ids = [f"r{i}" for i in range(n_raw)]
    syn_ids = [f"s{i}" for i in range(n_syn)]
    every = raw_ids + syn_ids
    refs = st.lists(st.sampled_from(every), max_size=4, unique=True).map(tuple) if every else st.just(())
    nodes = [Node(i, f"raw/{i}", "raw", "", links=draw(refs)) for i in raw_ids]
    for i in syn_ids:
        parent = draw(st.sampled_from(["", *(f"{s}" for s in syn_ids if s < i)]))
        path = f"{parent}/{i}" if parent else i
        nodes.append(Node(i, path, "synthetic", "", links=draw(refs), provenance=draw(refs),
                          deleted_step=draw(st.none() | st.just(1))))
    return nodes


@settings(max_examples=150, deadline=None)
@given(stores())
def test_property_bounds_and_monotonicity(nodes):
    stats = structure_stats(SnapshotView.from_nodes(nodes, SnapshotMeta()))
    assert 0.0 <= stats.coverage_one_hop <= stats.coverage_two_hop <= 1.0
    assert (stats.synthetic == 0) == (stats.clusters == 0)
    assert stats.clusters <= stats.synthetic and stats.merges <= stats.synthetic
    assert len(stats.index_out_degrees) + stats.empty_indexes == stats.synthetic
    assert list(stats.index_out_degrees) == sorted(stats.index_out_degrees) and 0 not in stats.index_out_degrees
    if stats.index_out_degrees:
        assert min(stats.index_out_degrees) <= stats.out_degree_median <= stats.out_degree_max
    assert stats.active_nodes == sum(1 for n in nodes if n.active)


@settings(max_examples=60, deadline=None)
@given(stores())
def test_property_an_index_of_every_raw_node_gives_full_coverage(nodes):
    raw = [n.id for n in nodes if n.kind == "raw"]
    hub = Node("hub", "hub", "synthetic", "", links=tuple(raw))
    stats = structure_stats(SnapshotView.from_nodes([*nodes, hub], SnapshotMeta()))
    assert stats.coverage_one_hop == (1.0 if raw else 0.0)
    assert stats.out_degree_max >= len(raw)
