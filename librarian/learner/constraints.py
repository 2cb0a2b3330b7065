"""Log-probs under the grammar a token was sampled with: the learner's side of constrained decoding.

A rollout sampled under a tool-call grammar drew each token from the
softmax over the tokens the grammar allowed at that step, and recorded that
log-prob. For the policy-gradient ratio to compare like with like, the
learner must renormalise its own logits under the same masks. A
`PolicySample` names its constrained spans `(start, end, grammar)`;
`disallowed_mask` replays the grammar over those tokens (xgrammar is
deterministic given the tokens) and returns, for every logit column, the
tokens the grammar forbade there; `mask_logits` pushes them to the lowest
finite value (in place) so softmax gives them zero mass (and zero gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from librarian.learner.errors import LearnerError


def _replayed(samples: Sequence[Any], first: int, columns: int, vocab: int, tokenizer: Any
              ) -> list[tuple[int, int, int, torch.Tensor]] | None:
    """(sample, first column, end column, allowed-token masks) of every constrained span, or None when nothing
    is constrained: the grammar replayed over the sampled tokens."""
    spans = [(b, s, e, g) for b, sample in enumerate(samples) for s, e, g in sample.constraints if e > s]
    if not spans:
        return None
    if tokenizer is None:
        raise LearnerError("these samples were generated under a tool-call grammar; the learner needs the "
                           "policy's tokenizer to renormalise its log-probs under the same masks")
    from librarian.models.base import BackendError
    from librarian.models.constrained import compiler_for

    compiler = compiler_for(tokenizer, vocab)
    out = []
    for b, start, end, grammar in spans:
        lo, hi = start - 1 - first, end - 1 - first
        if lo < 0 or hi > columns:
            raise LearnerError(f"constraint span ({start}, {end}) falls outside the trained columns")
        try:
            allowed = compiler.replay_masks(grammar, samples[b].token_ids[start:end])
        except BackendError as exc:
            raise LearnerError(f"sample {b}: its tokens {start}..{end} do not follow their grammar: {exc}") from exc
        out.append((b, lo, hi, allowed))
    return out


def disallowed_mask(samples: Sequence[Any], first: int, shape: tuple[int, int, int],
                    tokenizer: Any) -> torch.Tensor | None:
    """Bool (batch, columns, vocab): True where a grammar forbade the token; None when nothing is constrained.

    Logit column j of the learner's (sliced) logits predicts token `first + j + 1`.
    """
    replayed = _replayed(samples, first, shape[1], shape[2], tokenizer)
    if replayed is None:
        return None
    mask = torch.zeros(shape, dtype=torch.bool)
    for b, lo, hi, allowed in replayed:
        mask[b, lo:hi] = ~allowed
    return mask


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`logits` with forbidden tokens at the dtype's lowest finite value (a no-op without a mask)."""
    if mask is None:
        return logits
    # in place: the logits are the learner's own fresh tensor, and a copy would double the largest buffer
    return logits.masked_fill_(mask.to(logits.device), torch.finfo(logits.dtype).min)


def disallowed_rows(samples: Sequence[Any], first: int, rows: torch.Tensor, vocab: int,
                    tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The grammar masks of the trained positions only: (indices into `rows.nonzero()` order, (k, vocab) bool
    masks, True where forbidden), or None when nothing is constrained. Memory grows with the constrained
    tokens, not with batch x length x vocabulary as `disallowed_mask`'s does."""
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
        masks.append(~allowed[keep])
    return torch.cat(picked), torch.cat(masks)
