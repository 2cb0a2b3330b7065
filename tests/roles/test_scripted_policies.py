"""The scripted KBGym reader and curator, the heuristic builder, and the backward-pass task text."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from librarian.datasets import to_documents
from librarian.datasets.kbgym.build import build_kbgym
from librarian.datasets.kbgym.templates import TEMPLATES
from librarian.models import make_backend
from librarian.models.scripted.curator import question_keys
from librarian.models.scripted.kbgym import StatedFact, parse_fact, parse_question
from librarian.rewards.scoring import score_answer
from librarian.roles import (
    ToolContext,
    ToolEnv,
    kbgym_curator,
    kbgym_reader,
    librarian_builder,
    run_episode,
    run_episodes,
)
from librarian.roles.kbgym_passes import OUTCOMES, UNIFORM_INSTRUCTION, backward_task, curation_task, outcome
from librarian.search import EmbeddedIndex, IndexSync
from librarian.workspace import Add, Document, Workspace


@pytest.fixture(scope="module")
def kbgym():
    return build_kbgym(people=80, seed=3)


def _store(kb):
    docs = [replace(d, path=f"facts/{d.id}") for d in to_documents(kb.corpus)]
    ws = Workspace.from_documents(docs, raw_policy="editable")
    index = EmbeddedIndex("scripted-test")
    sync = IndexSync(index, ws)
    sync.sync()
    return ws, index, sync


def _stable(traj) -> str:
    data = traj.to_dict()
    for key in ("wall_s",):
        data.pop(key)
        data["summary"].pop(key)
    for turn in data["turns"]:
        turn.pop("wall_s"), turn.pop("generate_s")
    return json.dumps(data, sort_keys=True)


def test_every_template_parses_and_names_the_dataset_keys(kbgym) -> None:
    for template in TEMPLATES:
        inst = kbgym.pool(template.name)[0]
        plan = parse_question(inst.question)
        assert plan is not None, inst.question
        named = {k for k in plan.keys if not k.startswith("relation:")}
        assert named == set(inst.slot_keys), (inst.question, plan.keys, inst.slot_keys)
    assert parse_question("What is the meaning of life?") is None


def test_every_fact_sentence_parses(kbgym) -> None:
    for doc in kbgym.corpus:
        fact = parse_fact(doc.text)
        assert fact is not None and fact.rel == doc.source, doc.text
    assert parse_fact("Residents of Port Avel") is None
    assert parse_fact("Ada Moss lives in Port Avel.") == StatedFact("Ada Moss", "city", "Port Avel")


def test_scripted_reader_answers_every_template_on_the_flat_store_deterministically(kbgym) -> None:
    ws, index, _ = _store(kbgym)
    questions = [inst for t in TEMPLATES for inst in kbgym.pool(t.name)[:2]]
    role = kbgym_reader(budget=15, memory_window=30)
    ctx = ToolContext(ws, index)

    def run():
        envs = [ToolEnv(role, ctx, f"Question: {q.question}") for q in questions]
        return run_episodes(envs, make_backend("scripted", policy="kbgym_reader"), role)

    first, second = run(), run()
    assert [_stable(t) for t in first] == [_stable(t) for t in second]
    f1 = [score_answer("set_f1", t.answer, list(q.answers)) for q, t in zip(questions, first, strict=True)]
    assert sum(f1) / len(f1) >= 0.95
    assert all(t.errors == 0 and t.actions <= 15 for t in first)
    for traj in first:  # the reader sees only the conversation: its calls are search, read, answer
        assert {c["name"] for turn in traj.turns for c in turn.calls} <= {"search", "read", "answer"}


def _facts_store(facts):
    ws = Workspace.from_documents([Document(f"f{i}", t) for i, t in enumerate(facts)], raw_policy="editable")
    index = EmbeddedIndex("scripted-small")
    sync = IndexSync(index, ws)
    sync.sync()
    return ws, index, sync


RESIDENTS = [f"Person{i} Moss lives in Port Avel." for i in range(12)]
OTHERS = ["Ada Ray lives in Dunmore.", "Ben Lu's job is baker.", "Port Avel is rainy."]


def _ask(ws, index, question, budget=15):
    role = kbgym_reader(budget=budget, memory_window=30)
    return run_episode(ToolEnv(role, ToolContext(ws, index), f"Question: {question}"),
                       make_backend("scripted", policy="kbgym_reader"), role)


def test_reader_reads_an_index_in_one_action_instead_of_paging() -> None:
    ws, index, sync = _facts_store(RESIDENTS + OTHERS)
    flat = _ask(ws, index, "How many people live in Port Avel?")
    assert flat.answer == "12" and [c["name"] for t in flat.turns for c in t.calls].count("search") >= 3
    ws.apply(Add("Residents of Port Avel", links=tuple(f"f{i}" for i in range(12))))
    sync.sync()
    indexed = _ask(ws, index, "How many people live in Port Avel?")
    assert indexed.answer == "12"
    assert [c["name"] for t in indexed.turns for c in t.calls] == ["search", "read", "answer"]
    assert indexed.actions < flat.actions and indexed.turns[1].synthetic_touched == 1


def test_reader_trusts_an_index_and_answers_with_its_last_action() -> None:
    ws, index, sync = _facts_store(RESIDENTS + OTHERS)
    ws.apply(Add("Residents of Port Avel", links=("f0", "f1", "f2")))  # partial: the reader believes it
    sync.sync()
    assert _ask(ws, index, "How many people live in Port Avel?").answer == "3"
    short = _ask(ws, index, "Which city does Person3 Moss live in?", budget=1)
    assert short.answer == "unknown" and short.actions == 1 and not short.budget_exhausted


def _curate(ws, index, sync, question, budget=30):
    role = kbgym_curator(budget=budget)
    return run_episode(ToolEnv(role, ToolContext(ws, index, sync), curation_task(question)),
                       make_backend("scripted", policy="kbgym_curator"), role)


def test_curator_builds_extends_repairs_and_deletes_indexes() -> None:
    ws, index, sync = _facts_store(RESIDENTS + OTHERS + ["Ben Lu's hobby is chess."])
    partial = ws.apply(Add("Residents of Port Avel", links=("f0", "f1", "f13"))).created[-1]  # f13: Ben's job
    empty = ws.apply(Add("People whose job is astronaut")).created[-1]
    sync.sync()
    traj = _curate(ws, index, sync, "Which of Ben Lu's friends live in Port Avel?")
    names = [c["name"] for t in traj.turns for c in t.calls]
    assert traj.end == "done" and "unlink" in names and "link_many" in names
    assert set(ws.get(partial).links) == {f"f{i}" for i in range(12)}  # extended, the wrong link removed
    hub = next(n for n in ws if n.kind == "synthetic" and n.text == "Ben Lu")
    assert set(hub.links) == {"f13", "f15"}  # a hub links the person's own facts only
    assert ws.get(empty) is not None  # a key the question does not name is left alone
    _curate(ws, index, sync, "Who is the youngest person with the job astronaut?")
    assert ws.get(empty) is None  # an index under which the store holds nothing is deleted
    before = ws.version
    again = _curate(ws, index, sync, "Which of Ben Lu's friends live in Port Avel?")
    assert ws.version == before and again.end == "done"  # complete: change nothing


def test_curator_keys_come_from_the_wording() -> None:
    keys = question_keys("Who lives in Port Avel and has the job baker?")
    assert [(k.attr, k.anchor, k.title) for k in keys] == [
        ("city", "Port Avel", "Residents of Port Avel"), ("job", "baker", "People whose job is baker")]
    assert [k.attr for k in question_keys("Which of Ada Ray's friends have the job baker?")] == ["job", "person"]
    assert question_keys("Tell me a story.") == []


def test_backward_task_is_uniform(kbgym) -> None:
    ws, index, _ = _store(kbgym)
    q = kbgym.pool("qc1_job")[0]
    role = kbgym_reader(budget=1)
    traj = run_episode(ToolEnv(role, ToolContext(ws, index), f"Question: {q.question}"),
                       make_backend("scripted", policy="kbgym_reader"), role)
    f1 = score_answer("set_f1", traj.answer, list(q.answers))
    text = backward_task(q.question, traj, list(q.answers), f1)
    assert text.startswith(f"Question: {q.question}") and UNIFORM_INSTRUCTION in text
    assert f"Gold answer: {q.answers[0]}" in text and f"F1: {f1:.2f}" in text and outcome(traj, f1) in text
    assert outcome(traj, 0.0) == OUTCOMES[1] and outcome(traj, 1.0) == OUTCOMES[2]
    traj.answer = None
    assert outcome(traj, 0.0) == OUTCOMES[0]


def test_heuristic_builder_clusters_creates_with_provenance_merges_and_stops() -> None:
    texts = ["Alice planted apple trees in the orchard.\nThe orchard needs water.",
             "The orchard produced apples this autumn.", "Bob repaired the tractor engine.",
             "The tractor engine needs oil.", "Carol sings in the choir."]
    ws = Workspace.from_documents([Document(f"d{i}", t, path=f"notes/d{i}.txt") for i, t in enumerate(texts)])
    role = librarian_builder(budget=20)
    traj = run_episode(ToolEnv(role, ToolContext(ws), "Organise the workspace."),
                       make_backend("scripted", policy="librarian_builder"), role)
    assert traj.end == "done" and traj.errors == 0
    files = {n.path: n for n in ws if n.kind == "synthetic"}
    assert set(files) == {"topics", "topics/topic-orchard.md", "topics/topic-tractor.md"}
    assert files["topics/topic-orchard.md"].provenance == ("d0", "d1")
    assert set(files["topics"].links) == {files["topics/topic-orchard.md"].id, files["topics/topic-tractor.md"].id}
