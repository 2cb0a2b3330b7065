"""The JAM researcher's rollout worker: tiny-model and scripted-teacher episodes, hints only in training jobs,
one workspace rebuild per hash, and the rollout pool running it on a real local Ray session."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace

import pytest

from librarian.cluster.researcher_jobs import (
    ResearcherRolloutConfig,
    ResearchJob,
    ResearchRecord,
    ResearchSearchConfig,
)
from librarian.cluster.researcher_worker import (
    ResearcherRolloutWorker,
    ResearchJobError,
    path_enums,
    workspace_folders,
    workspace_paths,
)
from librarian.cluster.rollout_pool import RolloutPool
from librarian.config import load_config
from librarian.datasets.memorygym import MemoryGymConfig
from librarian.evaluation.memory_arms import build_store
from librarian.evaluation.memory_tasks import memorygym_task
from librarian.models.constrained import compiler_for
from librarian.pipelines.researcher.config import TrainResearcherConfig
from librarian.pipelines.researcher.data import build_stores, load_task
from librarian.pipelines.researcher.steps import canonical_ref, hint_input, verify
from librarian.rewards.source_recall import source_recall
from librarian.roles.definitions import jam_researcher
from librarian.roles.probing_env import snapshot
from librarian.roles.researcher import ResearchEnv

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="module")
def memory():
    task = memorygym_task(MemoryGymConfig(speakers=4, sessions=16, seed=1))
    ws = build_store(task.sessions, "hierarchical").workspace
    questions = [q for q in task.questions if q.support and q.qclass == "single-hop"]
    return ws, snapshot(ws), ws.content_hash(), questions


@pytest.fixture(scope="module")
def worker():
    spec = ResearcherRolloutConfig(options={"model": "tiny"}, budget=3, max_calls_per_turn=4, max_new_tokens=8,
                                   hint_every=1, torch_threads=1)
    return ResearcherRolloutWorker(spec, ResearchSearchConfig(snippet_chars=120))


def _job(memory, name, **kw):
    _, data, digest, qs = memory
    q = qs[0]
    return ResearchJob(name, "mg", q.id, q.question, data=data, digest=digest, **kw)


def test_tiny_model_episodes_carry_tokens_and_versions(worker, memory):
    records = worker.run(_job(memory, "a", group_size=2, seed=3))
    assert [r.index for r in records] == [0, 1] and all(isinstance(r, ResearchRecord) for r in records)
    for r in records:
        assert any(t.has_tokens for t in r.trajectory.turns)
        assert r.policy_version == worker.policy_version() and r.worker_pid == os.getpid()
        assert r.trajectory.turns[-1].forced  # a random model never finalizes: the loop forces it
        assert r.hints == 0 and all("Hint:" not in t.observation for t in r.trajectory.turns)


def test_policy_turns_are_grammar_constrained_and_teacher_turns_are_not(memory):
    spec = ResearcherRolloutConfig(options={"model": "tiny"}, budget=1, max_calls_per_turn=2, max_new_tokens=160,
                                   hint_every=0, torch_threads=1)
    assert spec.constrained and spec.free_text  # the defaults
    w = ResearcherRolloutWorker(spec, ResearchSearchConfig(snippet_chars=120))
    rec = w.run(_job(memory, "g", group_size=1, seed=1))[0]
    policy = [t for t in rec.trajectory.turns if t.has_tokens]
    assert policy and all(t.grammar for t in policy)
    assert policy[-1].forced and policy[0].grammar != policy[-1].grammar  # every tool, then finalize only
    quoted = '\\"{}\\"'.format  # a tool name as the grammar spells the JSON string
    assert all(quoted(name) in policy[0].grammar for name in ("open", "search", "browse", "finalize"))
    assert quoted("search") not in policy[-1].grammar and quoted("finalize") in policy[-1].grammar
    long = next(n.path for n in memory[0] if len(n.path) > 48)  # a memo path, longer than the generic pattern
    assert long in policy[0].grammar and long in policy[-1].grammar  # `path` and `sources` name the nodes
    if policy[0].finish_reason == "stop":  # a complete sample under the grammar parses into calls
        assert policy[0].calls and not policy[0].errors
    teacher = w.run(_job(memory, "gt", group_size=1, greedy=True, teacher="jam_researcher", budget=4))[0]
    assert all(not t.grammar for t in teacher.trajectory.turns)
    free = ResearcherRolloutWorker(ResearcherRolloutConfig(options={"model": "tiny"}, budget=1, max_new_tokens=4,
                                                  hint_every=0, constrained=False))
    assert all(not t.grammar for t in free.run(_job(memory, "u", group_size=1))[0].trajectory.turns)
    generic = ResearcherRolloutWorker(replace(spec, enum_paths=False, free_text=False, max_new_tokens=4))
    turns = generic.run(_job(memory, "p", group_size=1))[0].trajectory.turns
    assert all(t.grammar and long not in t.grammar for t in turns)


def test_hints_appear_only_in_training_jobs(worker, memory):
    _, _, _, qs = memory
    trained = worker.run(_job(memory, "train", group_size=1, hint=hint_input(qs[0])))[0]
    assert trained.hints >= 1
    assert any("Hint:" in t.observation for t in trained.trajectory.turns)
    hints = [t.observation.split("Hint:", 1)[1] for t in trained.trajectory.turns if "Hint:" in t.observation]
    assert not any(a.lower() in h.lower() for h in hints for a in qs[0].answers)  # a hint never states the answer
    evaluated = worker.run(_job(memory, "eval", group_size=1, greedy=True))[0]
    assert evaluated.hints == 0 and all("Hint:" not in t.observation for t in evaluated.trajectory.turns)
    off = ResearcherRolloutWorker(ResearcherRolloutConfig(options={"model": "tiny"}, budget=2, max_new_tokens=4, hint_every=0))
    assert off.run(_job(memory, "off", group_size=1, hint=hint_input(qs[0])))[0].hints == 0


def test_scripted_teacher_is_tokenized_and_finds_the_sources(worker, memory):
    _, _, _, qs = memory
    rec = worker.run(_job(memory, "teach", group_size=1, greedy=True, teacher="jam_researcher", budget=8))[0]
    assert rec.result.sources and rec.trajectory.errors == 0
    assert source_recall(rec.result.sources, qs[0].support) == 1.0
    assert all(t.has_tokens for t in rec.trajectory.turns) and rec.trajectory.segments()


def test_workspace_is_rebuilt_once_per_hash_and_checked(worker, memory):
    before = worker.cache_info()["rebuilt"]
    worker.run(_job(memory, "c1", group_size=1, budget=1))
    worker.run(_job(memory, "c2", group_size=1, budget=1))
    assert worker.cache_info()["rebuilt"] == max(before, 1)
    _, data, _, qs = memory
    with pytest.raises(ResearchJobError, match="does not match"):
        worker.run(ResearchJob("bad", "mg", qs[0].id, qs[0].question, group_size=1, data=data, digest="0" * 64))
    with pytest.raises(ResearchJobError, match="needs its workspace"):
        worker.run(ResearchJob("none", "mg", qs[0].id, qs[0].question, group_size=1))


@pytest.mark.slow
def test_pool_runs_researcher_workers_with_the_workspace_in_the_object_store(memory):
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"),
             log_to_driver=False, configure_logging=False)
    try:
        _, data, digest, qs = memory
        ref = ray.put(data)
        spec = ResearcherRolloutConfig(options={"model": "tiny"}, budget=2, max_new_tokens=4, torch_threads=1)
        with RolloutPool(ResearcherRolloutWorker, (spec, ResearchSearchConfig()), [{"num_cpus": 0.5}]) as pool:
            jobs = [ResearchJob(f"j{i}", "mg", q.id, q.question, group_size=2, seed=i, data=ref, digest=digest,
                                hint=hint_input(q) if i == 0 else None) for i, q in enumerate(qs[:2])]
            out = pool.run(jobs)
            assert list(out) == ["j0", "j1"] and all(len(v) == 2 for v in out.values())
            assert out["j0"][0].hints >= 1 and out["j1"][0].hints == 0
            assert ray.get(pool.workers[0].cache_info.remote())["rebuilt"] == 1
    finally:
        ray.shutdown()


def test_every_turn_of_the_teacher_is_a_sentence_of_its_students_grammar():
    """SFT teaches the teacher's text; GRPO samples under the grammar. On the learning preset's task every
    turn the SFT teacher writes (the calls, the thought, the finalize, the forced one included) must be one
    the student's grammar accepts, and the teacher must still find the gold sessions and the answer."""
    import xgrammar as xgr

    cfg = load_config(TrainResearcherConfig, [], config_file="configs/researcher_learning.yaml")
    task, train, _ = load_task(cfg)
    ws = build_stores(cfg, task)[0].workspace
    r = cfg.rollout
    spec = ResearcherRolloutConfig(options={"model": "tiny"}, budget=r.budget, max_calls_per_turn=r.max_calls_per_turn,
                                   max_new_tokens=r.max_new_tokens, hint_every=0, torch_threads=1,
                                   constrained=True, free_text=r.free_text, enum_paths=r.enum_paths)
    worker = ResearcherRolloutWorker(spec, ResearchSearchConfig(cfg.search.mode, cfg.search.embedder,
                                                                cfg.search.snippet_chars))
    data, digest = snapshot(ws), ws.content_hash()
    chosen = train[: cfg.sft.questions]
    jobs = [ResearchJob(f"sft-{q.id}", "mg", q.id, q.question, group_size=1, greedy=True, teacher=cfg.sft.teacher,
                        budget=cfg.sft.budget, data=data, digest=digest) for q in chosen]
    jobs.append(replace(jobs[-1], job_id="short", budget=spec.budget))  # the student's budget: a forced finalize
    records = [rec for job in jobs for rec in worker.run(job)]
    role = jam_researcher(budget=spec.budget, max_calls_per_turn=spec.max_calls_per_turn)
    env = ResearchEnv(role, worker.context(jobs[0]), chosen[0].question)
    tools = env.reset().tools
    loop = worker.env_factory.loop_config(replace(jobs[0], teacher="", greedy=False), workspace_paths(ws),
                                          workspace_folders(ws))
    compiler = compiler_for(worker.backend.tokenizer)
    grammars = {False: compiler.compile(loop.grammar(tools, role)),
                True: compiler.compile(loop.grammar(env.answer_tools(), role, max_calls=1))}
    turns = [t for rec in records for t in rec.trajectory.turns]
    assert any(t.forced for t in turns) and any(len(t.calls) > 1 for t in turns)
    assert any(c["name"] == "finalize" for t in turns if not t.forced for c in t.calls)
    for t in turns:
        matcher = xgr.GrammarMatcher(grammars[t.forced])
        assert matcher.accept_string(t.text) and matcher.is_completed(), f"the grammar refuses the teacher's {t.text!r}"
    longest = max(len(t.response_ids) for t in turns)  # the student must be able to write it in one turn
    assert longest <= spec.max_new_tokens, f"a teacher turn takes {longest} tokens, over max_new_tokens"
    kept = verify(records[:-1], {q.id: q for q in chosen}, canonical_ref(ws))
    assert kept.teacher_recall >= 0.9 and len(kept.trajectories) >= 7  # the answer in its short context


def test_the_grammar_lets_open_name_only_folders_browse_only_files_and_search_only_real_pages(worker, memory):
    """Calls the tools would refuse (browse a folder, open a file, page 67162399) are not sentences."""
    import xgrammar as xgr

    ws = memory[0]
    paths, folders = workspace_paths(ws), workspace_folders(ws)
    folder = next(f for f in folders if "/" in f)
    file = next(p for p in paths if p not in set(folders))
    assert dict(path_enums(paths, folders))["browse.path"] == tuple(p for p in paths if p not in set(folders))
    assert dict(path_enums(paths))["path"] == ("", *paths) and path_enums(()) == ()
    role = jam_researcher(budget=3, max_calls_per_turn=4)
    env = ResearchEnv(role, worker.context(_job(memory, "g")), "who?")
    loop = worker.env_factory.loop_config(_job(memory, "g", greedy=False), paths, folders)
    grammar = compiler_for(worker.backend.tokenizer).compile(loop.grammar(env.reset().tools, role))

    def accepts(name: str, arguments: dict) -> bool:
        call = json.dumps({"name": name, "arguments": arguments})
        return xgr.GrammarMatcher(grammar).accept_string(f"<tool_call>{call}</tool_call>")

    assert accepts("open", {"path": folder}) and accepts("open", {"path": ""})
    assert not accepts("open", {"path": file})
    assert accepts("browse", {"path": file, "query": "when"})
    assert not accepts("browse", {"path": folder, "query": "when"})
    assert accepts("search", {"query": "when", "page": 100})
    assert not accepts("search", {"query": "when", "page": 101})
