"""One short real episode with SmolLM2-135M-Instruct (loaded once per session from the bundled GGUF)."""

from __future__ import annotations

import pytest

from librarian.models import SamplingParams, make_backend
from librarian.roles import (
    LoopConfig,
    ToolContext,
    ToolEnv,
    kbgym_reader,
    librarian_builder,
    run_episode,
    run_episodes,
)
from librarian.roles.builder_task import build_task
from librarian.roles.tool_calls import parse_tool_calls
from librarian.workspace import Document, Workspace

from .conftest import make_context


@pytest.fixture(scope="session")
def smollm2():
    return make_backend("hf", model="smollm2")


@pytest.mark.slow
def test_smollm2_reader_episode_records_a_valid_trajectory(smollm2):
    role = kbgym_reader(budget=2)
    env = ToolEnv(role, make_context(), "Question: What is the job of Alice Johnson?")
    traj = run_episode(env, smollm2, role, LoopConfig(params=SamplingParams(max_new_tokens=16, temperature=0.0)))
    assert 1 <= len(traj.turns) <= 2 and traj.actions <= 2 and traj.end in ("answer", "budget")
    for turn in traj.turns:
        assert turn.response_ids and len(turn.logprobs) == len(turn.response_ids)
        assert turn.loss_mask == (0,) * len(turn.prompt_ids) + (1,) * len(turn.response_ids)
        prompt = smollm2.tokenizer.decode(list(turn.prompt_ids))
        assert prompt.startswith("<|im_start|>system\nYou answer questions") and '"name": "search"' in prompt
        assert turn.observation  # a tool result or an error observation, never a crash
    assert traj.segments()


@pytest.mark.slow
def test_every_constrained_smollm2_call_parses(smollm2):
    """Sampled at temperature 1 under the tools' grammar, SmolLM2's builder calls all parse (a budget of 2)."""
    docs = [Document(f"d{i}", f"Person {i} lives in Port Avel.", path=f"facts/d{i}") for i in range(4)]
    role = librarian_builder(budget=2)
    envs = []
    for _ in range(4):
        ws = Workspace.from_documents(docs)
        envs.append(ToolEnv(role, ToolContext(ws), build_task(ws)))
    tools = envs[0].reset().tools
    loop = LoopConfig(SamplingParams(max_new_tokens=160, temperature=1.0, seed=11), constrained=True,
                      grammar_enums=(("sources", tuple(d.path for d in docs)),))
    turns = [t for traj in run_episodes(envs, smollm2, role, loop) for t in traj.turns]
    assert len(turns) >= 4
    for turn in turns:
        parsed = parse_tool_calls(turn.text, tools)
        assert not parsed.errors and len(parsed.calls) == 1, turn.text
