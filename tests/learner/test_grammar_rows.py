"""Packed grammar masks (`constraints.GrammarRows`): placed on one device, unpacked exactly, 1/8 of bool rows."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.learner import constraints
from librarian.learner.batch import PolicySample
from librarian.learner.constraints import GrammarRows, disallowed_mask, disallowed_rows
from librarian.learner.errors import LearnerError
from librarian.learner.logprobs import _stats, chunked_stats
from librarian.models.constrained import unpack_bitmask

VOCAB = 100  # not a multiple of 32: the last word is partly padding


class FakeCompiler:
    """Replays a 'grammar' as a random bitmask that always allows the sampled token (seeded by the tokens)."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def replay_bitmask(self, grammar: str, token_ids) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((grammar, tuple(token_ids))) % (1 << 31))
        words = (self.vocab + 31) // 32
        bits = torch.randint(-(1 << 31), (1 << 31) - 1, (len(token_ids), words), generator=g, dtype=torch.int64)
        bits = bits.to(torch.int32)
        for i, tok in enumerate(token_ids):
            bits[i, tok // 32] |= torch.tensor(1 << (tok % 32), dtype=torch.int64).to(torch.int32)
        return bits


@pytest.fixture
def fake_grammar(monkeypatch):
    monkeypatch.setattr(constraints, "compiler_for", lambda tokenizer, vocab: FakeCompiler(vocab))


def _samples() -> list[PolicySample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for n, spans in ((12, ((4, 9, "g"),)), (9, ()), (15, ((3, 6, "g"), (8, 14, "h")))):
        ids = tuple(torch.randint(0, VOCAB, (n,), generator=g).tolist())
        mask = tuple(0 if i < 3 or i == 10 else 1 for i in range(n))  # token 10 constrained but not trained
        out.append(PolicySample(ids, mask, (0.0,) * n, (1.0,) * n, constraints=spans))
    return out


def _rows(samples, first: int = 1) -> tuple[torch.Tensor, int]:
    width = max(len(s.token_ids) for s in samples)
    mask = torch.zeros(len(samples), width - 1 - first, dtype=torch.bool)
    for b, s in enumerate(samples):
        for j in range(mask.shape[1]):
            pos = first + j + 1
            mask[b, j] = pos < len(s.token_ids) and bool(s.loss_mask[pos])
    return mask, width


def test_every_tensor_is_placed_on_the_asked_device(fake_grammar):
    samples = _samples()
    rows, _ = _rows(samples)
    packed = disallowed_rows(samples, 1, rows, VOCAB, tokenizer=object(), device=torch.device("meta"))
    assert packed.index.device.type == "meta" and packed.allowed.device.type == "meta"
    assert packed.device == torch.device("meta")
    dense = disallowed_mask(samples, 1, (len(samples), rows.shape[1], VOCAB), object(), device="meta")
    assert dense.device.type == "meta"
    assert disallowed_rows(samples, 1, rows, VOCAB, object()).device == rows.device  # default: the rows' device


def test_indices_and_masks_on_two_devices_are_refused():
    with pytest.raises(LearnerError, match="indices on cpu, masks on meta"):
        GrammarRows(torch.zeros(1, dtype=torch.long), torch.zeros(1, 4, dtype=torch.int32, device="meta"), VOCAB)


def test_packed_rows_unpack_to_exactly_the_dense_masks(fake_grammar):
    samples = _samples()
    rows, width = _rows(samples)
    packed = disallowed_rows(samples, 1, rows, VOCAB, object())
    dense = disallowed_mask(samples, 1, (len(samples), rows.shape[1], VOCAB), object())
    selected = dense[rows]  # the trained positions, in rows.nonzero() order
    assert selected.any() and not selected.all()
    assert torch.equal(packed.banned(0, int(rows.sum())), selected)
    # any window, with or without constrained rows inside
    for start, end in ((0, 3), (2, 11), (5, 6), (int(rows.sum()) - 4, int(rows.sum()))):
        got = packed.banned(start, end)
        want = selected[start:end]
        assert torch.equal(got, want) if want.any() else got is None
    # the constrained token outside the loss mask is not in the packed rows
    assert packed.index.shape[0] == int(rows[dense.any(-1)].sum()) < int(dense.any(-1).sum())


def test_packed_rows_take_an_eighth_of_bool_rows():
    vocab, k = 151936, 64
    bits = torch.zeros(k, (vocab + 31) // 32, dtype=torch.int32)
    packed = GrammarRows(torch.arange(k), bits, vocab)
    dense_bytes = k * vocab  # one byte per bool
    assert dense_bytes / packed.nbytes > 7.9
    assert unpack_bitmask(bits, vocab).shape == (k, vocab)


@pytest.mark.parametrize("chunk", [1, 4, 64])
def test_chunked_logprobs_under_packed_masks_equal_the_whole_batch(fake_grammar, chunk):
    samples = _samples()
    rows, _ = _rows(samples)
    packed = disallowed_rows(samples, 1, rows, VOCAB, object())
    n = int(rows.sum())
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(n, 16, generator=g, requires_grad=True)
    weight = torch.randn(VOCAB, 16, generator=g, requires_grad=True)
    allowed = ~packed.banned(0, n)
    targets = torch.multinomial(allowed.float(), 1, generator=g).squeeze(-1)  # allowed tokens
    got = chunked_stats(hidden, weight, None, targets, 0.7, chunk, packed)
    logits = (hidden @ weight.T) / 0.7
    logits = logits.masked_fill(packed.banned(0, n), torch.finfo(logits.dtype).min)
    logp = torch.log_softmax(logits, -1)
    want = logp.gather(-1, targets[:, None])[:, 0]
    assert torch.allclose(got[:, 0], want, atol=1e-5)
    grads = torch.autograd.grad(got[:, 0].sum(), (hidden, weight))
    wants = torch.autograd.grad(want.sum(), (hidden, weight))
    for a, b in zip(grads, wants, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    plain = _stats(hidden, weight, None, targets, 0.7, None)  # the masks matter here
    assert float((plain[:, 0] - want).detach().abs().max()) > 0.1


def test_masks_for_another_vocabulary_are_refused(fake_grammar):
    samples = _samples()
    rows, _ = _rows(samples)
    packed = disallowed_rows(samples, 1, rows, VOCAB, object())
    with pytest.raises(LearnerError, match="over 100 tokens for an output layer of 64"):
        chunked_stats(torch.zeros(int(rows.sum()), 8), torch.zeros(64, 8), None,
                      torch.zeros(int(rows.sum()), dtype=torch.long), 1.0, 4, packed)
