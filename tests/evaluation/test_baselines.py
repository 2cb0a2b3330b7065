"""Baseline stores: valid workspaces built through recorded ops, with the structure each one promises."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.datasets import to_documents
from librarian.datasets.kbgym.build import build_kbgym
from librarian.evaluation.baselines import BaselineError, build_baseline
from librarian.evaluation.baselines.common import entities, extractive_summary, sentences, triples
from librarian.workspace import Workspace, replay
from librarian.workspace.invariants import invariant_violations
from librarian.workspace.stats import structure_stats


@pytest.fixture(scope="module")
def flat() -> Workspace:
    kb = build_kbgym(people=80, seed=3)
    docs = [replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)]
    return Workspace.from_documents(docs, raw_policy="editable")


@pytest.fixture(scope="module")
def built(flat):
    before = flat.content_hash()
    out = {name: build_baseline(name, flat, **({"embedder": "hashing"} if name == "raptor" else {}))
           for name in ("flat", "graphrag", "hipporag", "raptor")}
    assert flat.content_hash() == before  # builders work on a copy
    return out


def _raw(ws: Workspace) -> dict[str, str]:
    return {n.id: n.text for n in ws if n.kind == "raw"}


@pytest.mark.parametrize("name", ["flat", "graphrag", "hipporag", "raptor"])
def test_each_baseline_is_a_valid_store_built_by_recorded_ops(built, flat, name) -> None:
    result = built[name]
    ws = result.workspace
    assert invariant_violations(*ws.state()) == []
    assert _raw(ws) == _raw(flat)  # raw documents are never touched
    assert len(ws.trace) == result.ops == ws.version
    assert replay(flat, ws.trace).content_hash() == ws.content_hash()  # the trace rebuilds it exactly
    stats = structure_stats(ws)
    if name == "flat":
        assert result.ops == 0 and stats.synthetic == 0 and result.construction_tokens == 0
    else:
        assert stats.synthetic > 0 and stats.coverage_one_hop > 0.9 and result.construction_tokens > 0


def test_graphrag_summaries_link_the_documents_naming_their_entities(built) -> None:
    ws = built["graphrag"].workspace
    summaries = [n for n in ws if n.kind == "synthetic"]
    assert len(summaries) == built["graphrag"].info["summaries"] >= 2
    for s in summaries:
        title = s.text.splitlines()[0]
        assert title.startswith("Community ")
        named = title.split(": ", 1)[1].split(", ")
        assert set(s.links) == set(s.provenance)
        mentioned = {e for d in s.links for e in entities(ws.get(d).text)}
        assert set(named) <= mentioned  # the title's entities are named by its members
        body = s.text.splitlines()[1:]
        member_sentences = {x for d in s.links for x in sentences(ws.get(d).text)}
        assert body and set(body) <= member_sentences  # extractive: sentences of its members only


def test_hipporag_hubs_are_entities_linking_their_passages_and_related_hubs(built, flat) -> None:
    ws = built["hipporag"].workspace
    hubs = {n.text: n for n in ws if n.kind == "synthetic"}
    assert built["hipporag"].info["hubs"] == len(hubs) > 50
    fact = next(n for n in flat if n.kind == "raw" and "'s job is " in n.text)
    t = triples(fact.text)[0]
    subj, obj = hubs[t.subj], hubs[t.obj]
    assert fact.id in subj.links and fact.id in obj.links  # context edges
    assert obj.id in subj.links and subj.id in obj.links  # the shared triple links the two hubs
    for hub in list(hubs.values())[:30]:
        passages = [ws.get(i) for i in hub.links if ws.get(i).kind == "raw"]
        assert passages and all(hub.text in entities(p.text) for p in passages)


def test_raptor_is_a_tree_of_summaries_over_every_document(built) -> None:
    result = built["raptor"]
    ws = result.workspace
    levels = result.info["nodes_per_level"]
    assert len(levels) >= 2 and levels[0] > levels[1]
    stats = structure_stats(ws)
    assert stats.merges > 0 and stats.max_depth >= 3
    leaves = [n for n in ws if n.kind == "synthetic" and n.name.startswith("l1-")]
    members = Counter(i for n in leaves for i in n.links)
    assert set(members) == {n.id for n in ws if n.kind == "raw"} and set(members.values()) == {1}  # a partition


def test_flattened_keeps_content_and_removes_the_hierarchy(built) -> None:
    base = built["raptor"].workspace
    result = build_baseline("flattened", base)
    ws = result.workspace
    assert invariant_violations(*ws.state()) == []
    syn = [n for n in ws if n.kind == "synthetic"]
    assert syn and all("/" not in n.path for n in syn)
    assert {n.id: (n.text, n.links, n.provenance) for n in syn} == \
        {n.id: (n.text, n.links, n.provenance) for n in base if n.kind == "synthetic"}
    assert base.by_path("raptor") is not None and ws.by_path("raptor") is None  # the emptied folder is gone


def test_shuffled_permutes_placement_keeping_texts_and_out_degrees(built) -> None:
    base = built["hipporag"].workspace
    a = build_baseline("shuffled", base, seed=1).workspace
    b = build_baseline("shuffled", base, seed=1).workspace
    c = build_baseline("shuffled", base, seed=2).workspace
    assert invariant_violations(*a.state()) == []
    assert a.content_hash() == b.content_hash() != c.content_hash()  # seeded
    old = {n.id: n for n in base if n.kind == "synthetic"}
    new = {n.id: n for n in a if n.kind == "synthetic"}
    assert {i: n.text for i, n in new.items()} == {i: n.text for i, n in old.items()}
    assert sorted(n.path for n in new.values()) == sorted(n.path for n in old.values())
    moved = sum(new[i].path != old[i].path for i in old)
    assert moved > len(old) // 2
    kept = sum(len(new[i].links) for i in new) / sum(len(old[i].links) for i in old)
    assert kept > 0.99 and all(len(new[i].links) <= len(old[i].links) for i in old)
    same = sum(len(set(new[i].links) & set(old[i].links)) for i in old)
    assert same < 0.2 * sum(len(old[i].links) for i in old)


def test_unknown_baselines_and_options_are_named(flat) -> None:
    with pytest.raises(BaselineError, match="unknown baseline 'nope'"):
        build_baseline("nope", flat)
    with pytest.raises(BaselineError, match=r"unknown option\(s\) \['colour'\]"):
        build_baseline("graphrag", flat, colour="red")
    with pytest.raises(BaselineError, match="embedder"):
        build_baseline("raptor", flat, embedder="none")


def test_triples_read_kbgym_facts_and_names_in_other_text() -> None:
    assert [(t.subj, t.rel, t.obj) for t in triples("Ada Moss's job is baker.")] == [("Ada Moss", "job", "baker")]
    assert [(t.subj, t.obj) for t in triples("Ada Moss lives in Port Avel.")] == [("Ada Moss", "Port Avel")]
    assert [(t.subj, t.rel, t.obj) for t in triples("Then Ada Moss met Bob Lind in Kiel.")] == \
        [("Ada Moss", "mentions", "Bob Lind"), ("Bob Lind", "mentions", "Kiel")]


SENTENCE = st.text(alphabet="abcdefgh XYZ", min_size=3, max_size=30).map(lambda s: s.strip() + ".")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(SENTENCE, min_size=1, max_size=5).map(" ".join), min_size=1, max_size=6),
       st.integers(1, 6))
def test_extractive_summary_picks_input_sentences_in_order(texts, k) -> None:
    summary = extractive_summary(texts, max_sentences=k)
    assert summary == extractive_summary(texts, max_sentences=k)  # deterministic
    picked = summary.splitlines()
    pool = list(dict.fromkeys(s for t in texts for s in sentences(t)))
    assert 1 <= len(picked) <= k or not pool
    assert all(s in pool for s in picked)
    assert [pool.index(s) for s in picked] == sorted(pool.index(s) for s in picked)
