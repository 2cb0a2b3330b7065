"""A group's shared opening run once (learner.shared_prefix): the same update as whole sequences, and the
pure functions that find and cut the openings."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.learner import Learner, LearnerConfig, LearnerError, LoraConfig, LossConfig, PolicySample
from librarian.learner.batch import collate, samples_from_trajectory
from librarian.learner.shared_prefix import (
    PrefixPass,
    common_prefix,
    prefix_groups,
    suffix_sample,
    trainable_opening,
)
from librarian.models.base import SamplingParams
from librarian.models.hf import tiny_llama
from librarian.roles import LoopConfig, ToolContext, ToolEnv, librarian_builder, run_episodes
from librarian.roles.builder_task import build_task
from librarian.workspace import Document, Workspace
from tests.learner.conftest import tiny_model
from tests.learner.test_constrained_logprobs import _learner_logprobs
from tests.learner.test_memory import step_gradients


def group_samples(n: int = 4, opening: int = 24, seed: int = 0, vocab: int = 2000) -> list[PolicySample]:
    """`n` multi-turn samples of one prompt: a shared opening, then per sample two generated turns with an
    untrained observation between them, of different lengths."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab, (opening,), generator=g).tolist()
    out = []
    for i in range(n):
        turn1, obs, turn2 = 3 + i, 4, 2 + 2 * i
        rest = torch.randint(0, vocab, (turn1 + obs + turn2,), generator=g).tolist()
        mask = [0] * opening + [1] * turn1 + [0] * obs + [1] * turn2
        adv = [(1.0 if i % 2 else -0.5) * m for m in mask]
        old = [-7.6 * m for m in mask]
        out.append(PolicySample(tuple(prompt + rest), tuple(mask), tuple(old), tuple(adv)))
    return out


def shared_prefix_logprobs(learner: Learner, samples, minimum: int) -> list[torch.Tensor]:
    """Each sample's generated tokens' log-probs as the learner's shared-prefix path computes them (no gradient):
    each group's opening once, the suffixes attending to its cache; in the order of `samples`."""
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for length, members in prefix_groups(samples, minimum):
            opening = PrefixPass(learner.model, members[0].token_ids[:length], learner.engine.device,
                                 learner.engine.autocast()) if length else None
            for sample in members:
                part = [suffix_sample(sample, length)]
                batch = collate(part, learner.pad_id)
                t, first = learner._targets(batch)
                extra = opening.inputs(batch.attention_mask) if opening else None
                logp, _ = learner.token_stats(batch, t, first, part, model_inputs=extra)
                out[id(sample)] = logp[0][t["mask"][0] > 0]
    return [out[id(s)] for s in samples]


def step(samples, pad_id, **cfg):
    learner = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=cfg.pop("lora", LoraConfig(rank=4, alpha=8)),
                                                   **cfg), pad_id=pad_id)
    return step_gradients(learner, samples)


def assert_same_gradients(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for key, value in a.items():
        assert torch.allclose(b[key], value, rtol=1e-4, atol=1e-7), (key, float((b[key] - value).abs().max()))


@pytest.mark.parametrize("lora", [LoraConfig(rank=4, alpha=8), LoraConfig(enabled=False)], ids=["lora", "full"])
@pytest.mark.parametrize("micro", [{"grad_accum": 1}, {"grad_accum": 3}, {"max_tokens_per_micro_batch": 1}],
                         ids=["one", "accum3", "unpadded"])
def test_a_shared_opening_gives_the_update_of_whole_sequences(pad_id, lora, micro):
    samples = group_samples()
    plain, plain_state = step(samples, pad_id, lora=lora, **micro)
    shared, shared_state = step(samples, pad_id, lora=lora, shared_prefix=8, **micro)
    for key in ("loss", "pg_loss", "entropy"):
        assert shared[key] == pytest.approx(plain[key], rel=1e-5, abs=1e-6), key
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    assert_same_gradients(plain_state, shared_state)
    # the opening (the 24 prompt tokens but the last, whose hidden state predicts the first trained token) ran
    # once, not 4 times
    assert plain["tokens"] - shared["tokens"] == 3 * 23


def drifted(pad_id, lora, **cfg) -> Learner:
    """A learner with a KL term whose policy has moved away from its frozen reference (seeded noise on every
    trained weight), so the KL term and its gradient are not zero."""
    learner = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=lora, loss=LossConfig(kl_coef=0.5), **cfg),
                      pad_id=pad_id)
    learner.freeze_reference()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in sorted(learner.model.named_parameters()):
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return learner


@pytest.mark.parametrize("lora", [LoraConfig(rank=4, alpha=8), LoraConfig(enabled=False)], ids=["lora", "full"])
def test_with_a_kl_term_the_reference_shares_the_opening_too(pad_id, lora):
    samples = group_samples()
    plain, plain_state = step_gradients(drifted(pad_id, lora, max_tokens_per_micro_batch=1), samples)
    shared, shared_state = step_gradients(drifted(pad_id, lora, max_tokens_per_micro_batch=1, shared_prefix=8),
                                          samples)
    assert abs(plain["kl"]) > 1e-6  # the reference differs from the policy
    for key in ("loss", "pg_loss", "kl"):
        assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-7), key
    assert_same_gradients(plain_state, shared_state)


def test_the_opening_carries_gradient():
    """The control: with the opening's backward left out (finish() skipped) the update differs."""
    samples = group_samples()
    learner = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=LoraConfig(rank=4, alpha=8), shared_prefix=8))
    full = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=LoraConfig(rank=4, alpha=8), shared_prefix=8))
    _, a = step_gradients(full, samples)
    original = learner._passes
    learner._passes = lambda s: ((o, p, w) for o, p, w in original(s) if p is not None)  # never finish()
    _, b = step_gradients(learner, samples)
    assert any(not torch.allclose(a[k], b[k], rtol=1e-3, atol=1e-6) for k in a)


def _docs() -> list[Document]:
    return [Document(f"d{i}", f"Person {i} works as a baker in town {i}.", path=f"facts/d{i}") for i in range(4)]


def test_grammar_sampled_builds_train_the_same_through_a_shared_opening():
    """Real constrained multi-turn builds of one task (grammar masks shifted with the suffix)."""
    backend = tiny_llama(seed=4)
    role = librarian_builder(budget=2)
    envs = [ToolEnv(role, ToolContext(Workspace.from_documents(_docs())), build_task(Workspace.from_documents(_docs())))
            for _ in range(3)]
    loop = LoopConfig(SamplingParams(max_new_tokens=120, temperature=1.0, seed=5), constrained=True,
                      grammar_enums=(("sources", tuple(d.path for d in _docs())),))
    trajs = run_episodes(envs, backend, role, loop)
    samples = [s for k, traj in enumerate(trajs)
               for s in samples_from_trajectory(traj, {t.index: (-1.0) ** k for t in traj.turns})]
    assert any(s.constraints for s in samples)
    groups = prefix_groups(samples, 16)
    assert len(groups) == 1 and groups[0][0] > 100, [g[0] for g in groups]
    reader = Learner(tiny_llama(seed=4).model, LearnerConfig(lora=LoraConfig(enabled=False), logprob_chunk=7),
                     pad_id=backend.pad_id, tokenizer=backend.tokenizer)
    for whole, shared in zip(_learner_logprobs(reader, samples), shared_prefix_logprobs(reader, samples, 16),
                             strict=True):
        assert whole.shape == shared.shape and torch.allclose(whole, shared, atol=1e-5)
    results = []
    for shared in (0, 16):
        learner = Learner(tiny_llama(seed=4).model, LearnerConfig(lr=1e-2, lora=LoraConfig(rank=4, alpha=8),
                                                                  shared_prefix=shared, logprob_chunk=7),
                          pad_id=backend.pad_id, tokenizer=backend.tokenizer)
        results.append(step_gradients(learner, samples))
    (plain, a), (fast, b) = results
    assert fast["loss"] == pytest.approx(plain["loss"], rel=1e-5, abs=1e-6)
    assert_same_gradients(a, b)


def test_shared_prefix_refuses_what_it_cannot_share():
    with pytest.raises(LearnerError, match="shared_prefix must be >= 0"):
        LearnerConfig(shared_prefix=-1)
    for bad in ({"gradient_checkpointing": True}, {"engine": "deepspeed"}):
        with pytest.raises(LearnerError, match="shared_prefix needs"):
            LearnerConfig(shared_prefix=8, **bad)

    sample = group_samples(1)[0]
    with pytest.raises(LearnerError, match="trained token"):
        suffix_sample(sample, trainable_opening(sample) + 1)


tokens = st.lists(st.integers(0, 3), min_size=0, max_size=12)


@given(tokens, tokens)
def test_common_prefix_is_the_longest_shared_start(a, b):
    n = common_prefix(a, b)
    assert a[:n] == b[:n] and (n == min(len(a), len(b)) or a[n] != b[n])


@st.composite
def samples(draw):
    opening = draw(st.lists(st.integers(0, 2), min_size=1, max_size=6))
    out = []
    for _ in range(draw(st.integers(1, 6))):
        own = draw(st.lists(st.integers(0, 2), min_size=0, max_size=4))
        gen = draw(st.lists(st.integers(0, 2), min_size=1, max_size=4))
        ids = opening + own + gen
        mask = [0] * (len(ids) - len(gen)) + [1] * len(gen)
        out.append(PolicySample(tuple(ids), tuple(mask), (0.0,) * len(ids), (0.0,) * len(ids)))
    return out


@settings(max_examples=200)
@given(samples(), st.integers(1, 5))
def test_groups_cover_every_sample_once_and_their_openings_are_shared_and_untrained(batch, minimum):
    groups = prefix_groups(batch, minimum)
    members = [s for _, group in groups for s in group]
    assert sorted(map(id, members)) == sorted(map(id, batch))
    for length, group in groups:
        assert length == 0 or (length >= minimum and len(group) > 1)
        for s in group:
            assert s.token_ids[:length] == group[0].token_ids[:length]
            assert length <= trainable_opening(s)
            cut = suffix_sample(s, length)
            assert s.token_ids[:length] + cut.token_ids == s.token_ids
            assert sum(cut.loss_mask) == sum(s.loss_mask)
