"""The JAM memorizer: memos, the hierarchical workspace, and incremental appends."""

from __future__ import annotations

import pytest

from librarian.datasets.memorygym import MemoryGymConfig, synthesize_history
from librarian.models.scripted import ScriptedBackend
from librarian.roles.memorizer import Memorizer, extractive_memo, group_of, llm_memo, speakers
from librarian.workspace import Document, views


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    _, sessions, _ = synthesize_history(MemoryGymConfig(speakers=4, sessions=16, seed=5))
    return [Document(s.id, s.text) for s in sessions]


def test_memo_keeps_people_and_facts_and_drops_small_talk():
    doc = Document("s1", "Session 1 (2024-01-08)\nAda Lane: How have you been? I moved to Oxbarrow last week!\n"
                         "Bo Ivy: Same here, mostly. My mother Cleo Ivy says hello.")
    memo = extractive_memo(doc)
    assert memo.startswith("Session 1 (2024-01-08). People: Ada Lane, Bo Ivy, Cleo Ivy.")
    assert "Oxbarrow" in memo and "Cleo Ivy says hello" in memo
    assert "How have you been" not in memo and "Same here" not in memo
    assert speakers(doc.text) == ["Ada Lane", "Bo Ivy"] and group_of(doc.text) == "ada-lane--bo-ivy"
    assert len(extractive_memo(doc, max_chars=40)) <= 40


def test_memorize_builds_a_traceable_hierarchy(docs):
    ws = Memorizer().memorize(docs)
    root = views.open(ws, "memory").text
    groups = [n for n in ws.children("memory") if n.kind == "directory"]
    assert len(groups) >= 2
    for d in docs:
        raw = ws.get(d.id)
        assert raw.kind == "raw" and raw.path == f"sessions/{d.id}" and raw.text == d.text
        memo = ws.by_path(f"memory/{group_of(d.text)}/{d.id}.md")
        assert memo.kind == "synthetic" and memo.provenance == (d.id,)
        readme = ws.by_path(f"memory/{group_of(d.text)}").text
        assert f"- {d.id}.md (source: sessions/{d.id}): {memo.text}" in readme
        assert all(p in readme.split("\n")[0] for p in speakers(d.text))
    for g in groups:
        assert f"- {g.name}/:" in root


def test_an_appended_session_changes_only_its_memo_and_its_groups_readme(docs):
    m = Memorizer()
    *first, last = docs
    group = group_of(last.text)
    assert any(group_of(d.text) == group for d in first), "the fixture must append into an existing group"
    before = m.memorize(first)
    after = m.append_session(before, last)
    old = {n.id: n for n in before.all_nodes()}
    new = {n.id: n for n in after.all_nodes()}
    assert all(i in new for i in old)
    changed = sorted(new[i].path for i in new if i not in old or old[i] != new[i])
    assert changed == [f"memory/{group}", f"memory/{group}/{last.id}.md", f"sessions/{last.id}"]
    assert after.by_path(f"memory/{group}").text == Memorizer().memorize(docs).by_path(f"memory/{group}").text
    with pytest.raises(ValueError, match="already"):
        m.append_session(after, last)


def test_an_appended_session_of_new_people_adds_one_group(docs):
    m = Memorizer()
    ws = m.memorize(docs[:4])
    new = Document("session-900", "Session 99 (2025-01-01)\nZed Quill: I moved to Lowmantle.\nYara Moss: Hello.")
    out = m.append_session(ws, new)
    old = {n.id: n for n in ws.all_nodes()}
    changed = sorted(n.path for n in out.all_nodes() if n.id not in old or old[n.id] != n)
    assert changed == ["memory", "memory/yara-moss--zed-quill", "memory/yara-moss--zed-quill/session-900.md",
                       "sessions/session-900"]
    assert "- yara-moss--zed-quill/: Yara Moss & Zed Quill" in out.by_path("memory").text


def test_llm_memos_come_from_the_backend(docs):
    backend = ScriptedBackend(lambda m, t: "<content>memo: " + m[-1]["content"].split("[sessions/")[1][:11] + "</content>")
    ws = Memorizer(memo_fn=llm_memo(backend)).memorize(docs[:3])
    memo = ws.by_path(f"memory/{group_of(docs[0].text)}/{docs[0].id}.md")
    assert memo.text == f"memo: {docs[0].id}"
