"""Constrained decoding end to end: grammar-sampled calls parse, and the learner's log-probs equal the rollout's."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.learner import Learner, LearnerConfig
from librarian.learner.batch import collate, samples_from_trajectory
from librarian.learner.config import LoraConfig
from librarian.learner.losses import token_logprobs
from librarian.models.base import SamplingParams
from librarian.models.constrained import tool_call_grammar
from librarian.models.hf import tiny_llama
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder, run_episodes
from librarian.roles.builder_task import build_task
from librarian.roles.builder_tools import BUILDER_TOOLS
from librarian.roles.tool_calls import parse_tool_calls
from librarian.workspace import Document, Workspace

TOOLS = [t.schema() for t in BUILDER_TOOLS]


def _docs() -> list[Document]:
    return [Document(f"d{i}", f"Person {i} works as a baker in town {i}.", path=f"facts/d{i}") for i in range(4)]


def _episodes(backend, constrained: bool, group: int = 3, budget: int = 2, seed: int = 5, tokens: int = 160):
    role = librarian_builder(budget=budget)
    envs = []
    for _ in range(group):
        ws = Workspace.from_documents(_docs())
        envs.append(ToolEnv(role, ToolContext(ws), build_task(ws)))
    loop = LoopConfig(SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=seed), constrained=constrained,
                      grammar_enums=(("sources", tuple(d.path for d in _docs())),))
    return run_episodes(envs, backend, role, loop)


def _learner_logprobs(learner: Learner, samples) -> list[torch.Tensor]:
    """The learner's log-probs of each sample's generated tokens (the computation its loss uses)."""
    batch = collate(samples, learner.pad_id)
    t, first = learner._targets(batch)
    with torch.no_grad():
        logp, _ = learner.token_stats(batch, t, first, samples)
    return [logp[i][t["mask"][i] > 0] for i in range(len(samples))]


def _role_tools() -> list:
    role = librarian_builder(budget=2)
    ws = Workspace.from_documents(_docs())
    return ToolEnv(role, ToolContext(ws), build_task(ws)).reset().tools


def test_every_constrained_call_of_a_random_model_parses():
    backend = tiny_llama(seed=3)
    tools = _role_tools()
    assert {t["function"]["name"] for t in tools} > {t["function"]["name"] for t in TOOLS}
    for traj in _episodes(backend, constrained=True, group=3, budget=2):
        for turn in traj.turns:
            assert turn.grammar, "a constrained turn records its grammar"
            parsed = parse_tool_calls(turn.text, tools)
            assert not parsed.errors, (turn.text, parsed.errors)
            assert len(parsed.calls) == 1


def test_unconstrained_random_model_makes_malformed_calls():
    """The control: without the grammar the same model almost never writes a valid call."""
    backend = tiny_llama(seed=3)
    turns = [t for traj in _episodes(backend, constrained=False, group=3, budget=1, tokens=40) for t in traj.turns]
    assert sum(bool(t.errors) for t in turns) >= len(turns) - 1
    assert all(not t.grammar for t in turns)


@pytest.mark.parametrize("chunk", [0, 7], ids=["whole-batch", "chunked"])
def test_learner_recomputes_the_rollouts_constrained_logprobs(chunk):
    backend = tiny_llama(seed=4)
    trajs = _episodes(backend, constrained=True, group=3, budget=2)
    samples = [s for traj in trajs for s in samples_from_trajectory(traj, {t.index: 1.0 for t in traj.turns})]
    assert any(s.constraints for s in samples)
    learner = Learner(backend.model, LearnerConfig(lora=LoraConfig(enabled=False), logprob_chunk=chunk),
                      pad_id=backend.pad_id, tokenizer=backend.tokenizer)
    assert learner.chunked == bool(chunk)
    recomputed = _learner_logprobs(learner, samples)
    for sample, new in zip(samples, recomputed, strict=True):
        old = torch.tensor([lp for lp, m in zip(sample.old_logprobs, sample.loss_mask, strict=True) if m])
        assert old.shape == new.shape
        assert torch.allclose(old, new, atol=1e-4), float((old - new).abs().max())
    # forced tokens (one allowed token) have log-prob 0 under the grammar
    assert any(float(v) > -1e-6 for new in recomputed for v in new)


def test_without_the_masks_the_logprobs_disagree():
    """The masks matter: the unconstrained softmax gives other log-probs for the same tokens."""
    backend = tiny_llama(seed=4)
    trajs = _episodes(backend, constrained=True, group=2, budget=1)
    samples = [s for traj in trajs for s in samples_from_trajectory(traj, {t.index: 1.0 for t in traj.turns})]

    learner = Learner(backend.model, LearnerConfig(lora=LoraConfig(enabled=False)), pad_id=backend.pad_id,
                      tokenizer=backend.tokenizer)
    batch = collate(samples, learner.pad_id)
    t, first = learner._targets(batch)
    with torch.no_grad():
        plain = token_logprobs(learner._logits(batch.input_ids, batch.attention_mask, first), t["ids"])
    old = torch.tensor([list(s.old_logprobs[1:]) + [0.0] * (batch.input_ids.shape[1] - len(s.old_logprobs))
                        for s in samples])[:, first:]
    assert float(((plain - old).abs() * t["mask"]).max()) > 0.1


def test_grammar_holds_sources_to_the_given_paths():
    grammar = tool_call_grammar(TOOLS, enums={"sources": ["facts/d0", "facts/d1"]})
    assert "facts/d0" in grammar and "facts/d1" in grammar
    backend = tiny_llama(seed=6)
    out = backend.generate([[{"role": "user", "content": "build"}]] * 4, TOOLS,
                           SamplingParams(n=1, max_new_tokens=160, temperature=1.0, seed=1, grammar=grammar))
    for row in out:
        parsed = parse_tool_calls(row[0].text, TOOLS)
        assert not parsed.errors
        for call in parsed.calls:
            assert set(call.arguments.get("sources", [])) <= {"facts/d0", "facts/d1"}
