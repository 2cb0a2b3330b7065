"""The episode loop: budget, memory window, compaction, forced answer, records, loss masks, determinism."""

from __future__ import annotations

import json

import pytest

from librarian.models import SamplingParams
from librarian.models.scripted import ScriptedBackend, make_scripted_backend, tool_call_text
from librarian.roles import (
    LoopConfig,
    ToolEnv,
    Trajectory,
    TurnRecord,
    kbgym_reader,
    librarian_answerer,
    librarian_builder,
    run_episode,
    run_episodes,
)
from librarian.roles.toolbox import get_tools, schemas

from .conftest import make_context

QUESTION = "Question: What is the job of Alice Johnson?"


def reader_env(question: str = QUESTION, role=None):
    return ToolEnv(role or kbgym_reader(), make_context(), question)


class Recorder:
    """A scripted policy that records what it was shown and answers with a fixed program."""

    def __init__(self, program):
        self.program, self.seen, self.tools_seen = program, [], []

    def __call__(self, messages, tools):
        self.seen.append([dict(m) for m in messages])
        self.tools_seen.append([t["function"]["name"] for t in tools or []])
        return self.program(len(self.seen) - 1, messages)


def _stable(traj: Trajectory) -> str:
    data = traj.to_dict()
    data.pop("wall_s")
    data["summary"].pop("wall_s")
    for turn in data["turns"]:
        turn.pop("wall_s"), turn.pop("generate_s")
    return json.dumps(data, sort_keys=True)


def test_scripted_reader_answers_and_records_costs():
    traj = run_episode(reader_env(), make_scripted_backend("kbgym_first_hit"), kbgym_reader())
    assert traj.end == "answer" and traj.answer == "Alice Johnson's job is arborist."
    assert [t.calls[0]["name"] for t in traj.turns] == ["search", "read", "answer"]
    assert traj.actions == 3 and not traj.budget_exhausted and traj.errors == 0
    read = traj.turns[1]
    assert read.nodes_touched == ("f1",) and read.raw_touched == 1 and read.chars_read == len(read.observation)
    assert traj.chars_read == sum(len(t.observation) for t in traj.turns)
    assert traj.est_tokens_read == sum(-(-len(t.observation) // 4) for t in traj.turns)
    assert [m["role"] for m in traj.messages] == ["system", "user"] + ["assistant", "tool"] * 3


def test_scripted_runs_are_deterministic_and_batching_changes_nothing():
    backend = make_scripted_backend()
    questions = [QUESTION, "Question: Who lives in Dorringham?", "Question: What is Carol Lee's hobby?"]
    alone = [run_episode(reader_env(q), backend, kbgym_reader()) for q in questions]
    batched = run_episodes([reader_env(q) for q in questions], backend, kbgym_reader())
    again = run_episodes([reader_env(q) for q in questions], backend, kbgym_reader())
    assert [_stable(t) for t in alone] == [_stable(t) for t in batched] == [_stable(t) for t in again]


def test_budget_stops_the_episode_and_errors_cost_one_action_each():
    policy = Recorder(lambda i, _m: "no call here" if i % 2 else tool_call_text("search", query="Dorringham"))
    traj = run_episode(reader_env(), ScriptedBackend(policy), kbgym_reader(budget=5))
    assert traj.end == "budget" and traj.answer is None and traj.budget_exhausted
    assert traj.actions == 5 and len(traj.turns) == 5 and len(policy.seen) == 5
    assert [t.errors[0]["kind"] if t.errors else "ok" for t in traj.turns] == ["ok", "no_call", "ok", "no_call", "ok"]
    assert traj.turns[1].observation.startswith("error (no_call)") and traj.turns[1].actions == 1


def test_memory_window_keeps_only_the_last_k_pairs():
    policy = Recorder(lambda i, _m: tool_call_text("search", query=f"query number {i}"))
    run_episode(reader_env(), ScriptedBackend(policy), kbgym_reader(budget=6, memory_window=2))
    sizes = [len(s) for s in policy.seen]
    assert sizes == [2, 4, 6, 6, 6, 6]
    last = policy.seen[-1]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert "query number 3" in last[2]["content"] and "query number 4" in last[4]["content"]
    none = Recorder(lambda i, _m: tool_call_text("search", query="x"))
    run_episode(reader_env(), ScriptedBackend(none), kbgym_reader(budget=3, memory_window=0))
    assert [len(s) for s in none.seen] == [2, 2, 2]


def test_full_history_grows_and_the_compaction_hook_shrinks_it():
    role = kbgym_reader(budget=6).with_(memory_window=None)
    grow = Recorder(lambda i, _m: tool_call_text("search", query="Dorringham"))
    run_episode(reader_env(role=role), ScriptedBackend(grow), role)
    assert [len(s) for s in grow.seen] == [2, 4, 6, 8, 10, 12]

    def compactor(history):
        return [{"role": "user", "content": f"(summary of {len(history) // 2} earlier actions)"}]

    shrink = Recorder(lambda i, _m: tool_call_text("search", query="Dorringham"))
    traj = run_episode(reader_env(role=role), ScriptedBackend(shrink), role,
                       LoopConfig(compactor=compactor, compact_at_chars=600))
    assert traj.compactions >= 1 and max(len(s) for s in shrink.seen) < 12
    assert any("summary of" in m["content"] for s in shrink.seen for m in s)
    assert len(traj.messages) == 2 + 2 * 6  # the transcript keeps everything


def test_librarian_answerer_is_forced_to_answer_when_the_budget_runs_out():
    def program(_i, messages):
        if "Answer now" in messages[-1]["content"]:
            return tool_call_text("answer", text="my best guess")
        return tool_call_text("list", path="")

    policy = Recorder(program)
    ctx = make_context()
    traj = run_episode(ToolEnv(librarian_answerer(budget=3), ctx, "Question: who?"), ScriptedBackend(policy),
                       librarian_answerer(budget=3))
    assert traj.end == "forced_answer" and traj.answer == "my best guess" and traj.budget_exhausted
    assert traj.actions == 3 and len(traj.turns) == 4 and traj.turns[-1].forced and traj.turns[-1].actions == 0
    assert policy.tools_seen[:3] == [["list", "read", "answer"]] * 3 and policy.tools_seen[3] == ["answer"]


def test_a_forced_answer_without_a_call_takes_the_message_text():
    def program(_i, messages):
        return "It is Alice." if "Answer now" in messages[-1]["content"] else tool_call_text("list", path="")

    traj = run_episode(ToolEnv(librarian_answerer(budget=2), make_context(), "Q"), ScriptedBackend(Recorder(program)),
                       librarian_answerer(budget=2))
    assert traj.end == "forced_answer" and traj.answer == "It is Alice."


def test_several_calls_per_turn_stop_at_the_budget():
    role = kbgym_reader(budget=2).with_(max_calls_per_turn=3, stop=())
    three = "".join(tool_call_text("search", query=q) for q in ("a", "Dorringham", "c"))
    traj = run_episode(reader_env(role=role), ScriptedBackend(lambda _m, _t: three), role)
    (turn,) = traj.turns
    assert turn.actions == 2 and traj.end == "budget"
    assert turn.observation.startswith("[1] ") and "(1 more call(s) not run: the action budget ran out)" in turn.observation


def test_llm_turns_carry_tokens_logprobs_and_masks(tiny):
    role = kbgym_reader(budget=3)
    envs = [reader_env(q, role) for q in (QUESTION, "Question: Who is Bob Smith's friend?")]
    config = LoopConfig(params=SamplingParams(max_new_tokens=8, temperature=1.0, seed=0))
    trajs = run_episodes(envs, tiny, role, config)
    for traj in trajs:
        assert traj.actions == 3 and traj.end == "budget" and len(traj.turns) == 3
        for turn in traj.turns:
            assert len(turn.token_ids) == len(turn.loss_mask) == len(turn.prompt_ids) + len(turn.response_ids)
            assert sum(turn.loss_mask) == len(turn.response_ids) == len(turn.logprobs) > 0
            assert all(lp <= 0 for lp in turn.logprobs)
        # the prompt of turn t is the rendered memory: opening plus the earlier pairs, tool output included
        second = tiny.tokenizer.decode(list(traj.turns[1].prompt_ids))
        assert traj.turns[0].observation.splitlines()[0] in second
        for seg in traj.segments():
            assert len(seg.token_ids) == len(seg.loss_mask) == len(seg.logprobs)
            generated = [t for t, m in zip(seg.token_ids, seg.loss_mask, strict=True) if m]
            assert generated == [i for k in seg.turns for i in traj.turns[k].response_ids]
            assert all(lp == 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask, strict=True) if not m)
    again = run_episodes([reader_env(q, role) for q in (QUESTION, "Question: Who is Bob Smith's friend?")],
                         tiny, role, config)
    assert [[t.response_ids for t in tr.turns] for tr in trajs] == [[t.response_ids for t in tr.turns] for tr in again]


def test_segments_pack_turns_whose_prompt_extends_the_previous_sequence():
    t0 = TurnRecord(0, "a", prompt_ids=(1, 2), response_ids=(3,), logprobs=(-0.5,))
    t1 = TurnRecord(1, "b", prompt_ids=(1, 2, 3, 9, 9), response_ids=(4, 5), logprobs=(-0.1, -0.2))
    t2 = TurnRecord(2, "c", prompt_ids=(1, 7), response_ids=(6,), logprobs=(-0.3,))  # window moved: new segment
    traj = Trajectory("r", "task", 5, turns=[t0, t1, t2])
    first, second = traj.segments()
    assert first.token_ids == (1, 2, 3, 9, 9, 4, 5) and first.loss_mask == (0, 0, 1, 0, 0, 1, 1)
    assert first.logprobs == (0.0, 0.0, -0.5, 0.0, 0.0, -0.1, -0.2) and first.turns == (0, 1)
    assert second.token_ids == (1, 7, 6) and second.loss_mask == (0, 0, 1) and second.turns == (2,)
    assert Trajectory("r", "t", 1, turns=[TurnRecord(0, "x")]).segments() == []


def test_signature_listing_writes_short_tool_lines_into_the_system_turn_and_hands_no_schemas():
    def program(_i, messages):
        if "Answer now" in messages[-1]["content"]:
            return tool_call_text("answer", text="guess")
        return tool_call_text("list", path="")

    policy = Recorder(program)
    role = librarian_answerer(budget=2)
    config = LoopConfig(tool_listing="signatures")
    traj = run_episode(ToolEnv(role, make_context(), "Question: who?"), ScriptedBackend(policy), role, config)
    assert traj.end == "forced_answer" and policy.tools_seen == [[], [], []]  # the backend got no schemas
    system = policy.seen[0][0]["content"]
    assert system.startswith(traj.messages[0]["content"]) and system != traj.messages[0]["content"]
    assert "- list(path?: string)" in system and "- answer(text: string)" in system and '"properties"' not in system
    assert "- answer(text: string)" in policy.seen[2][0]["content"] and "- list(" not in policy.seen[2][0]["content"]
    assert traj.messages[0]["content"] == policy.seen[0][0]["content"].split("\n\n# Tools")[0]  # the record is unchanged


def test_signature_listing_under_a_grammar_shows_the_compact_arguments_only():
    tools = schemas(get_tools(librarian_builder().tools))
    prompts = [[{"role": "system", "content": "Build."}, {"role": "user", "content": "go"}]]
    plain, _ = LoopConfig(tool_listing="signatures").listed(prompts, tools)
    compact, handed = LoopConfig(tool_listing="signatures", constrained=True).listed(prompts, tools)
    assert handed is None and prompts[0][0]["content"] == "Build."  # the caller's prompts are not changed
    assert "create_file(path: string, text?: string, instruction?: string" in plain[0][0]["content"]
    assert "create_file(path: string, instruction?: string, sources: list of string)" in compact[0][0]["content"]
    same, kept = LoopConfig().listed(prompts, tools)
    assert same is prompts and kept is tools
    teacher, _ = LoopConfig(tool_listing="signatures", compact_listing=True).listed(prompts, tools)
    assert teacher == compact  # an SFT teacher (not sampled under the grammar) sees its student's prompt
    with pytest.raises(ValueError, match="tool_listing"):
        LoopConfig(tool_listing="yaml")
