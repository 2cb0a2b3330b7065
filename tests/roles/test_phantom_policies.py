"""The scripted PhantomWiki reader and curator on universes of the official generator (3 seeds, 2 depths)."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from librarian.datasets import to_documents
from librarian.datasets.phantomwiki import PWConfig, convert, generate
from librarian.models import make_backend
from librarian.models.scripted.kbgym import Event
from librarian.models.scripted.kbgym import parse_question as kbgym_question
from librarian.models.scripted.phantom import parse_facts, parse_question
from librarian.models.scripted.phantom_curator import merged_into
from librarian.models.scripted.phantom_reader import index_key, indexed, parse_index
from librarian.rewards.scoring import score_answer
from librarian.roles import ToolContext, ToolEnv, kbgym_curator, kbgym_reader, run_episode, run_episodes
from librarian.roles.kbgym_passes import curation_task
from librarian.search import EmbeddedIndex, IndexSync
from librarian.workspace import Workspace

UNIVERSES = [(1, 6), (2, 6), (3, 8), (2, 8)]  # (seed, question depth): three seeds, two depths


@pytest.fixture(scope="module")
def universes(tmp_path_factory):
    root = tmp_path_factory.mktemp("pw-universes")

    def one(spec):
        seed, depth = spec
        raw = generate(root / f"s{seed}-d{depth}", PWConfig(seed=seed, question_depth=depth))
        return spec, convert(raw, seed=seed)

    with ThreadPoolExecutor(len(UNIVERSES)) as pool:  # the generator runs as subprocesses
        return dict(pool.map(one, UNIVERSES))


def _store(bundle):
    docs = [replace(d, path=f"facts/{d.id}") for d in to_documents(bundle.corpus)]
    ws = Workspace.from_documents(docs, raw_policy="editable")
    index = EmbeddedIndex("phantom-test")
    sync = IndexSync(index, ws)
    sync.sync()
    return ws, index, sync


def _exam(ws, index, questions, policy="phantom_reader", budget=40):
    role = kbgym_reader(budget=budget, memory_window=None)
    envs = [ToolEnv(role, ToolContext(ws, index), f"Question: {q.question}") for q in questions]
    return run_episodes(envs, make_backend("scripted", policy=policy), role)


@pytest.mark.parametrize("spec", UNIVERSES, ids=[f"seed{s}-depth{d}" for s, d in UNIVERSES])
def test_reader_answers_every_template_on_the_flat_store(universes, spec):
    bundle = universes[spec]
    ws, index, _ = _store(bundle)
    trajs = _exam(ws, index, bundle.questions)
    by_template = defaultdict(list)
    for q, t in zip(bundle.questions, trajs, strict=True):
        by_template[q.template].append(score_answer(q, t.answer))
        assert {c["name"] for turn in t.turns for c in turn.calls} <= {"search", "read", "answer"}
        assert t.answer is not None and not t.budget_exhausted
    assert len(by_template) == (8 if spec[1] == 6 else 14)
    low = {name: sum(f) / len(f) for name, f in by_template.items() if sum(f) / len(f) < 0.9}
    assert not low, low


def test_kbgym_reader_reads_phantomwiki_questions_with_the_phantomwiki_grammar(universes):
    bundle = universes[(1, 6)]
    ws, index, _ = _store(bundle)
    questions = bundle.questions[:16]
    ours = _exam(ws, index, questions, "phantom_reader")
    through_kbgym = _exam(ws, index, questions, "kbgym_reader")
    assert [t.answer for t in ours] == [t.answer for t in through_kbgym]
    assert all(score_answer(q, t.answer) == 1.0 for q, t in zip(questions, through_kbgym, strict=True))
    # wording both grammars read ("How many friends does X have?") costs the KBGym reader one first search
    shared = [kbgym_question(q.question) is not None for q in questions]
    assert any(shared)
    for both, a, b in zip(shared, ours, through_kbgym, strict=True):
        assert b.actions == a.actions + (1 if both else 0)


def _curate(ws, index, sync, question, policy="phantom_curator"):
    role = kbgym_curator(budget=50)
    return run_episode(ToolEnv(role, ToolContext(ws, index, sync), curation_task(question)),
                       make_backend("scripted", policy=policy), role)


def test_curator_adds_relation_indexes_that_state_the_members_and_save_the_reader_actions(universes):
    bundle = universes[(1, 6)]
    ws, index, sync = _store(bundle)
    # questions "Who is the <term of more than one step> of <name>?": the index's members are the answer
    chosen = [q for q in bundle.questions if (e := parse_question(q.question))[0] == "who" and e[1][0] == "rel"
              and e[1][2][0] == "name" and indexed(e[1][1])][:6]
    assert len(chosen) >= 3
    before = _exam(ws, index, chosen)
    for q in chosen:
        traj = _curate(ws, index, sync, q.question, policy="kbgym_curator")  # dispatches to phantom_curator
        assert traj.end == "done" and not traj.budget_exhausted
    created = [n for n in ws if n.kind == "synthetic"]
    assert created, "the curator added no index"
    keys = {index_key(e[1], e[2][1]): q for q in chosen if (e := parse_question(q.question)[1])}
    for node in created:
        key = parse_index(node.text)
        assert key is not None and node.text == f"Index {key}"
        stated = {f.obj for target in node.links for f in parse_facts(ws.get(target).text)}
        assert len(stated) == len(node.links)  # one stating fact per member
        if key in keys:  # the question's own relation: its members are the gold answer
            assert stated == set(keys[key].answers)
    assert set(keys) & {parse_index(n.text) for n in created}
    after = _exam(ws, index, chosen)
    assert [score_answer(q, t.answer) for q, t in zip(chosen, after, strict=True)] == [1.0] * len(chosen)
    assert sum(t.actions for t in after) < sum(t.actions for t in before)
    assert any(turn.synthetic_touched for t in after for turn in t.turns)
    # a second pass changes nothing: the indexes are found and trusted
    version = ws.version
    for q in chosen:
        _curate(ws, index, sync, q.question)
    assert ws.version == version


def test_an_index_merged_by_the_near_duplicate_guard_is_deleted():
    merged = Event("add", {"text": "Index cousin_of_a", "links": ["f1"]},
                   "not added: near-duplicate of 'n3'; merged into it")
    assert merged_into([merged]) == ["n3"]
    assert merged_into([merged, Event("delete", {"id": "n3"}, "deleted n3")]) == []
