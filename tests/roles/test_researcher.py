"""The JAM researcher: tools, round budget, forced finalize, and the scripted researcher's source recall."""

from __future__ import annotations

import json
from statistics import mean

import pytest

from librarian.datasets.memorygym import MemoryGymConfig, build_instances, synthesize_history
from librarian.models.constrained import MAX_ITEMS, MAX_STRING, compiler_for
from librarian.models.hf import smollm2_tokenizer
from librarian.models.scripted import ScriptedBackend, make_scripted_backend, tool_call_text
from librarian.models.scripted.researcher import ScriptedResearcher, _terms, clip_words, short_query
from librarian.rewards.source_recall import source_recall
from librarian.roles import ToolContext
from librarian.roles.definitions import jam_researcher as jam_researcher_role
from librarian.roles.episode import LoopConfig
from librarian.roles.memorizer import Memorizer
from librarian.roles.researcher import ResearchEnv, research
from librarian.roles.researcher_tools import finalized, relevant_lines
from librarian.roles.toolbox import TOOLS
from librarian.roles.tools import run_tool
from librarian.search import EmbeddedIndex, HashingEmbedder, IndexSync
from librarian.search.analysis import analyze
from librarian.workspace import Document, Workspace


def _ctx(ws: Workspace) -> ToolContext:
    index = EmbeddedIndex("jam", HashingEmbedder(64))
    sync = IndexSync(index, ws)
    sync.sync(embed=True)
    return ToolContext(ws, index, sync, search_mode="hybrid")


@pytest.fixture(scope="module")
def history():
    _, sessions, ledger = synthesize_history(MemoryGymConfig(speakers=4, sessions=30, seed=3))
    return [Document(s.id, s.text) for s in sessions], build_instances(ledger)


@pytest.fixture(scope="module")
def hier(history):
    return _ctx(Memorizer().memorize(history[0]))


@pytest.fixture(scope="module")
def flat(history):
    return _ctx(Workspace.from_documents([Document(d.id, d.text, path=f"sessions/{d.id}") for d in history[0]]))


def _run(ctx, key, **args):
    return run_tool(TOOLS[key], ctx, args)


def test_open_search_browse_and_finalize_with_provenance(hier, history):
    docs, _ = history
    top = _run(hier, "jam.open", path="memory")
    assert top.ok and top.text.startswith("README of memory:\nMemory of past sessions")
    hits = _run(hier, "jam.search", query="moved", page=1)
    assert hits.ok and hits.text.startswith('search "moved" page 1: 5 hits')
    memo = next(n for n in hier.workspace if n.kind == "synthetic")
    out = _run(hier, "jam.browse", path=memo.path, query="anything")
    assert out.ok and f"provenance: sessions/{memo.provenance[0]}" in out.text
    assert not _run(hier, "jam.browse", path="memory", query="x").ok  # a folder: use open
    fin = _run(hier, "jam.finalize", context="facts", sources=[memo.path, "sessions/" + docs[1].id, "nope"])
    assert fin.terminal and "not found: nope" in fin.text
    result = finalized(fin.answer)
    assert result.sources == (memo.provenance[0], docs[1].id) and result.sufficient


def test_browse_keeps_only_query_relevant_lines():
    text = "\n".join(["alpha beta", "gamma delta", "the city of Oxbarrow", "epsilon", "Oxbarrow again"])
    assert [i for i, _ in relevant_lines(text, "Oxbarrow city")] == [3, 5]
    assert len(relevant_lines("one\ntwo", "zzz")) == 2  # short files come back whole


def test_rounds_budget_counts_messages_and_out_of_rounds_forces_finalize(hier):
    role = jam_researcher_role(budget=2, max_calls_per_turn=3)

    def policy(messages, tools):
        if len(tools) == 1:
            return tool_call_text("finalize", context="best effort", sources=["memory"], sufficient=False)
        return "".join(tool_call_text("open", path="") for _ in range(3))

    res = research([hier], ["Who moved?"], ScriptedBackend(policy), role)[0]
    traj = res.trajectory
    assert [t.actions for t in traj.turns] == [1, 1, 0] and traj.turns[-1].forced
    assert traj.end == "forced_answer" and res.result.context == "best effort" and not res.result.sufficient
    assert traj.turns[0].observation.count("README of /") == 3
    env = ResearchEnv(role, hier, "q")
    assert env.reset().messages[1]["content"] == "Request: q"


def test_scripted_researcher_recall_is_at_least_as_good_on_the_hierarchical_workspace(hier, flat, history):
    _, questions = history
    backend = make_scripted_backend("jam_researcher")
    recall = {}
    for name, ctx in (("flat", flat), ("hierarchical", hier)):
        runs = research([ctx] * len(questions), [q.question for q in questions], backend)
        recall[name] = mean(source_recall(r.result.sources, q.support) for r, q in zip(runs, questions, strict=True))
        assert all(r.trajectory.end == "answer" and r.rounds <= 20 for r in runs)
        assert all(json.loads(r.trajectory.answer)["sources"] is not None for r in runs)
    print(f"source recall: flat {recall['flat']:.3f}, hierarchical {recall['hierarchical']:.3f} "
          f"({len(questions)} Memory-Gym instances)")
    assert recall["hierarchical"] >= recall["flat"] and recall["hierarchical"] >= 0.9


def test_scripted_researcher_follows_paths_with_spaces(history):
    docs, questions = history
    spaced = {d.id: d.id.replace("-", " ") for d in docs}  # "session 003": ids and paths with spaces
    ws = Memorizer().memorize([Document(spaced[d.id], d.text) for d in docs])
    ctx = _ctx(ws)
    qs = questions[:12]
    runs = research([ctx] * len(qs), [q.question for q in qs], make_scripted_backend("jam_researcher"))
    recall = mean(source_recall(r.result.sources, [spaced[s] for s in q.support]) for r, q in zip(runs, qs, strict=True))
    assert recall >= 0.9, recall


def test_compact_scripted_researcher_writes_only_what_the_grammar_accepts():
    """The SFT teacher of a constrained student: calls one a line, a short thought, strings of at most 40
    characters without '"' or '\\' (a capped string has no escapes), at most 4 sources, paths that exist;
    and a context that still holds the answer."""
    import xgrammar as xgr

    assert clip_words('He said "go \\ now" and left the room at once, quickly.') == "He said 'go / now' and left the room at"
    request = 'According to the notes: in which town does "Ada Moss" live these days?'
    assert short_query(request, ["Ada Moss"]) == "notes town Ada Moss live days"
    docs = [Document(f"s{i}", f'Ben Hale: Ada Moss said "hi" at the C:\\ depot. Ada Moss lives in Port Avel.\n'
                              f"Cy Rowe: I met Ada Moss at the market, stall {i}.") for i in range(7)]
    ctx = _ctx(Workspace.from_documents([Document(d.id, d.text, path=f"sessions/{d.id}") for d in docs]))
    role = jam_researcher_role(budget=6, max_calls_per_turn=4)
    run = research([ctx], [request], ScriptedBackend(ScriptedResearcher(compact=True)), role)[0]
    paths = tuple(n.path for n in ctx.workspace if n.path)
    loop = LoopConfig(constrained=True, free_text=True, grammar_enums=(("path", ("", *paths)), ("sources", paths)))
    env = ResearchEnv(role, ctx, request)
    compiler = compiler_for(smollm2_tokenizer())
    grammars = {False: compiler.compile(loop.grammar(env.reset().tools, role)),
                True: compiler.compile(loop.grammar(env.answer_tools(), role, max_calls=1))}
    for t in run.trajectory.turns:
        matcher = xgr.GrammarMatcher(grammars[t.forced])
        assert matcher.accept_string(t.text) and matcher.is_completed(), f"the grammar refuses {t.text!r}"
    assert any(len(t.calls) > 1 for t in run.trajectory.turns)
    assert "Port Avel" in run.result.context and len(run.result.context) <= MAX_STRING
    assert 1 <= len(run.result.cited) <= MAX_ITEMS < len(docs)


@pytest.mark.parametrize("text", ["Ada Wainwright lives in Eskerby.", "Which cities has Pavel said he lived in?",
                                  "My mother's kite-flying club meets on 2021-03-04, she said: great!",
                                  "GPUs shipped; the worker's jobs"])
def test_the_scripted_researchers_terms_are_the_search_indexs(text):
    """The researcher ranks evidence by the terms a search would match (it may not import the search layer)."""
    assert _terms(text) == frozenset(analyze(text))
