"""Log-probs under the grammar a token was sampled with: the learner's side of constrained decoding.

A rollout sampled under a tool-call grammar drew each token from the
softmax over the tokens the grammar allowed at that step, and recorded that
log-prob. For the policy-gradient ratio to compare like with like, the
learner must renormalise its own logits under the same masks. A
`PolicySample` names its constrained spans `(start, end, grammar)`; the
grammar is replayed over those tokens (xgrammar is deterministic given the
tokens) into xgrammar's packed bitmask, one int32 word per 32 tokens.

- `disallowed_rows` (the chunked path) keeps the masks packed: a
  `GrammarRows` of the trained positions, 1/8 of the bytes of bool rows
  (16k constrained tokens at a 152k vocabulary: 0.3 GB instead of 2.4 GB),
  placed on the device the log-probs are computed on and unpacked there one
  chunk at a time (`GrammarRows.banned`); the chunks' cuts are searched in a
  CPU copy of the row indices made where the rows are built, so no forward
  pass waits for a device-to-host copy of them;
- `disallowed_mask` (the whole-batch path) is the dense (batch, columns,
  vocab) mask, built on the logits' device; `mask_logits` pushes forbidden
  tokens to the lowest finite value (in place) so softmax gives them zero
  mass (and zero gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner.errors import LearnerError
from librarian.models.base import BackendError
from librarian.models.constrained import compiler_for, unpack_bitmask


def _replayed(samples: Sequence[Any], first: int, columns: int, vocab: int, tokenizer: Any
              ) -> list[tuple[int, int, int, torch.Tensor]] | None:
    """(sample, first column, end column, allowed-token bitmask (tokens, ceil(vocab / 32)) int32) of every
    constrained span, or None when nothing is constrained: the grammar replayed over the sampled tokens."""
    spans = [(b, s, e, g) for b, sample in enumerate(samples) for s, e, g in sample.constraints if e > s]
    if not spans:
        return None
    if tokenizer is None:
        raise LearnerError("these samples were generated under a tool-call grammar; the learner needs the "
                           "policy's tokenizer to renormalise its log-probs under the same masks")
    compiler = compiler_for(tokenizer, vocab)
    out = []
    for b, start, end, grammar in spans:
        lo, hi = start - 1 - first, end - 1 - first
        if lo < 0 or hi > columns:
            raise LearnerError(f"constraint span ({start}, {end}) falls outside the trained columns")
        try:
            allowed = compiler.replay_bitmask(grammar, samples[b].token_ids[start:end])
        except BackendError as exc:
            raise LearnerError(f"sample {b}: its tokens {start}..{end} do not follow their grammar: {exc}") from exc
        out.append((b, lo, hi, allowed))
    return out


@dataclass(frozen=True)
class GrammarRows:
    """Grammar masks of selected rows, packed: `index` (k,) ascending positions in the selected rows (the
    `rows.nonzero()` order), `allowed` (k, ceil(vocab / 32)) int32, xgrammar's bitmask of the tokens allowed
    there (bit i of word j: token 32 j + i), on one device. `host_index` is `index`'s copy in CPU memory (made
    once, where the rows are built): `bounds` searches it, so cutting chunks never waits for the device."""

    index: torch.Tensor
    allowed: torch.Tensor
    vocab: int
    host_index: torch.Tensor | None = None  # None: copied from `index` here

    def __post_init__(self) -> None:
        if self.index.device != self.allowed.device:
            raise LearnerError(f"grammar rows: indices on {self.index.device}, masks on {self.allowed.device}; "
                               "they must be on one device")
        if self.index.ndim != 1 or self.allowed.ndim != 2 or self.allowed.shape[0] != self.index.shape[0] or \
                self.allowed.shape[1] != (self.vocab + 31) // 32:
            raise LearnerError(f"grammar rows: index {tuple(self.index.shape)} and bitmask "
                               f"{tuple(self.allowed.shape)} do not fit a vocabulary of {self.vocab}")
        if self.host_index is None:
            object.__setattr__(self, "host_index", self.index.cpu())

    @property
    def device(self) -> torch.device:
        return self.index.device

    @property
    def nbytes(self) -> int:
        return self.index.nelement() * self.index.element_size() + \
            self.allowed.nelement() * self.allowed.element_size()

    def to(self, device: torch.device | str) -> GrammarRows:
        device = torch.device(device)
        if device == self.device:
            return self
        return GrammarRows(self.index.to(device), self.allowed.to(device), self.vocab, self.host_index)

    def bounds(self, starts: Sequence[int]) -> list[int]:
        """For each of `starts`, how many constrained rows lie before it (`index` is ascending), from the host
        copy: no device-to-host copy, so no wait for the device, in every forward pass."""
        return torch.searchsorted(self.host_index, torch.tensor(list(starts), dtype=torch.long)).tolist()

    def banned(self, start: int, end: int, lo: int | None = None, hi: int | None = None) -> torch.Tensor | None:
        """Bool (end - start, vocab) on this device, True where a grammar forbade the token, for selected rows
        [start, end); None when none of them is constrained. `lo:hi`, the constrained rows inside (`bounds`),
        saves the search."""
        if lo is None or hi is None:
            lo, hi = self.bounds([start, end])
        if hi <= lo:
            return None
        return banned_chunk(self.index[lo:hi] - start, self.allowed[lo:hi], end - start, self.vocab)


def banned_chunk(local: torch.Tensor, allowed: torch.Tensor, rows: int, vocab: int) -> torch.Tensor:
    """Bool (rows, vocab), True where forbidden: constrained rows `local` (indices into the chunk) with their
    packed `allowed` bitmask unpacked (on its device); every other row allows everything."""
    out = torch.zeros(rows, vocab, dtype=torch.bool, device=allowed.device)
    out[local] = ~unpack_bitmask(allowed, vocab)
    return out


def disallowed_mask(samples: Sequence[Any], first: int, shape: tuple[int, int, int], tokenizer: Any,
                    device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Bool (batch, columns, vocab) on `device`: True where a grammar forbade the token; None when nothing is
    constrained. Logit column j of the learner's (sliced) logits predicts token `first + j + 1`.
    """
    replayed = _replayed(samples, first, shape[1], shape[2], tokenizer)
    if replayed is None:
        return None
    mask = torch.zeros(shape, dtype=torch.bool, device=device)
    for b, lo, hi, allowed in replayed:
        mask[b, lo:hi] = ~unpack_bitmask(allowed.to(device), shape[2])
    return mask


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`logits` with forbidden tokens at the dtype's lowest finite value (a no-op without a mask)."""
    if mask is None:
        return logits
    # in place: the logits are the learner's own fresh tensor, and a copy would double the largest buffer
    return logits.masked_fill_(mask.to(logits.device), torch.finfo(logits.dtype).min)


def disallowed_rows(samples: Sequence[Any], first: int, rows: torch.Tensor, vocab: int, tokenizer: Any,
                    device: torch.device | str | None = None) -> GrammarRows | None:
    """The grammar masks of the trained positions only, packed (`GrammarRows`, on `device`, default `rows`'s),
    or None when nothing is constrained. Memory grows with the constrained tokens (vocab / 8 bytes each), not
    with batch x length x vocabulary as `disallowed_mask`'s does."""
    replayed = _replayed(samples, first, rows.shape[1], vocab, tokenizer)
    if replayed is None:
        return None
    index = torch.full(tuple(rows.shape), -1, dtype=torch.long)
    where = rows.detach().cpu().nonzero(as_tuple=True)
    index[where] = torch.arange(len(where[0]))
    picked, masks = [], []
    for b, lo, hi, allowed in replayed:
        at = index[b, lo:hi]
        keep = at >= 0  # a constrained token outside the loss mask carries no loss
        picked.append(at[keep])
        masks.append(allowed[keep])
    order = torch.cat(picked)
    order, perm = torch.sort(order)  # spans come in row-major order already; sorting makes `bounds` safe
    device = rows.device if device is None else torch.device(device)
    return GrammarRows(order.to(device), torch.cat(masks)[perm].to(device), vocab, order)
