"""One short real episode with SmolLM2-135M-Instruct (loaded once per session from the bundled GGUF)."""

from __future__ import annotations

import pytest

from librarian.models import SamplingParams, make_backend
from librarian.roles import LoopConfig, ToolEnv, kbgym_reader, run_episode

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
