"""`librarian demo` end to end at small scale, and the scripted curator it runs."""

from __future__ import annotations

import json

from librarian.cli import main
from librarian.models import make_backend
from librarian.roles import ToolContext, ToolEnv, kbgym_curator, run_episode
from librarian.roles.kbgym_passes import curation_task
from librarian.search.factory import SearchConfig, make_index
from librarian.search.sync import IndexSync
from librarian.workspace import Add, Delete, Document, Workspace, codec
from librarian.workspace.growth import store_growth


def test_demo_runs_end_to_end(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    code = main(["demo", f"out_dir={out}", "search.embedder=hashing", "rl=false", "curate_questions=10",
                 "memory.embedder=hashing", "memory.speakers=4", "memory.sessions=24"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["replay_identical"] is True and results["invariant_violations"] == 0
    assert results["index_documents"] > 0 and results["links"] > 0
    assert 0 < results["coverage_one_hop"] <= results["coverage_two_hop"] <= 1
    assert results["config"]["curate_questions"] == 10
    for name in ("snapshot.parquet", "trace.parquet", "initial.parquet", "store_growth.png"):
        assert (out / name).stat().st_size > 0
    assert "replay of" in capsys.readouterr().out
    jam = results["jam"]
    assert jam["source_recall_hierarchical"] >= jam["source_recall_flat"] and jam["questions"] > 0
    assert 0 < jam["append_ops"] <= 4  # the appended session: raw node, memo, README edits; nothing rebuilt
    lo, hi = jam["source_recall_hierarchical_ci"]
    assert lo <= jam["source_recall_hierarchical"] <= hi
    assert (out / "jam" / "arms.png").stat().st_size > 0 and (out / "jam" / "results.json").is_file()
    summary = (out / "summary.md").read_text(encoding="utf-8").splitlines()
    assert summary[0] == "# What this demo run shows" and "(coverage: the share of the facts" in summary[4]
    assert summary[4].startswith(f"- The scripted curator built {results['index_documents']} index documents")
    assert "## JAM memory (part 2; details in jam/arms.md)" in summary and f"- {jam['findings'][0]}" in summary
    assert any(f.startswith(("hierarchical vs flat: no difference shown", "hierarchical beats flat",
                             "flat beats hierarchical")) for f in jam["findings"])

    nodes, _ = codec.read_parquet(out / "snapshot.parquet")
    index_docs = [n for n in nodes if n.kind == "synthetic"]
    assert index_docs and all(n.path != n.id and n.path.split("-")[0] in n.text.lower() for n in index_docs)


def test_demo_rejects_a_config_typo(capsys) -> None:
    assert main(["demo", "peopel=3"]) == 2
    assert "did you mean 'people'" in capsys.readouterr().err


def test_demo_curator_links_only_facts_that_state_the_key() -> None:
    facts = ["Ada Moss lives in Port Avel.", "Ben Ray lives in Port Avel.", "Ada Moss's hobby is chess.",
             "Cy Lu lives in Dunmore.", "Port Avel is rainy."]
    ws = Workspace.from_documents([Document(f"f{i}", t) for i, t in enumerate(facts)], raw_policy="editable")
    index = make_index(SearchConfig(embedder="none"))
    sync = IndexSync(index, ws)
    sync.sync()
    curator, role, ctx = make_backend("scripted", policy="kbgym_curator"), kbgym_curator(), ToolContext(ws, index, sync)

    def curate(question: str):
        return run_episode(ToolEnv(role, ctx, curation_task(question)), curator, role)

    traj = curate("How many people live in Port Avel?")
    built = [n for n in ws if n.kind == "synthetic"]
    assert traj.end == "done" and len(built) == 1
    assert built[0].text == "Residents of Port Avel" and set(built[0].links) == {"f0", "f1"}  # not "is rainy"
    again = curate("How many people live in Port Avel?")  # complete already: search, read, done; no edit
    assert [n.id for n in ws if n.kind == "synthetic"] == [built[0].id] and not any(
        t.workspace_changed for t in again.turns)
    curate("How many people live in Atlantis?")  # nothing in the store under that key: no empty index
    assert len([n for n in ws if n.kind == "synthetic"]) == 1


def test_store_growth_follows_the_trace() -> None:
    ws = Workspace.from_documents([Document(f"f{i}", f"fact {i}") for i in range(5)], raw_policy="editable")
    initial = ws.copy()

    a = ws.apply(Add("a", links=("f1", "f2"))).created[-1]
    ws.apply(Add("b", links=("f3",)))
    ws.apply(Delete(a))
    series = store_growth(initial, ws.trace, points=10)
    assert [p.step for p in series] == [0, 1, 2, 3]
    assert [p.authored_alive for p in series] == [0, 1, 2, 1]
    assert [p.links for p in series] == [0, 2, 3, 1]
