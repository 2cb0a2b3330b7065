"""A group's shared opening, run through the model once per update instead of once per sequence.

GRPO trains G completions of one prompt, so the G packed sequences of a group
begin with the same tokens: system prompt, tool signatures, the task and its
listing (about 800 of the 1,400 tokens of a build in the learning preset). A
learner pass over each whole sequence computes that opening G times.

`PrefixPass` runs the model over the opening once and keeps its key/value
cache. Each micro-batch of suffixes (`suffix_sample`) attends to that cache,
expanded over its rows without a copy, at the positions that follow the
opening. Gradients that reach the cache accumulate on detached leaves, and
`finish` sends them through the opening's graph in one backward pass. Same
parameters, positions and attention as the whole-sequence pass, so the
log-probs and gradients are equal up to float rounding
(tests/learner/test_shared_prefix.py).

With a KL term the reference policy needs the opening too: the learner runs
it once more under the reference (no gradient) and its suffixes attend to that
cache (`Learner.step`).

The opening stops before the first trained token's context: a token at
position i is predicted by the hidden state at i - 1, which must belong to the
suffix pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner.batch import PolicySample
from librarian.learner.errors import LearnerError


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def trainable_opening(sample: PolicySample) -> int:
    """The longest opening of `sample` that may be shared: it ends before the first trained token's context
    (and leaves at least two tokens to the suffix)."""
    first = next((i for i, m in enumerate(sample.loss_mask) if m), len(sample.token_ids))
    return max(0, min(first - 1, len(sample.token_ids) - 2))


def prefix_groups(samples: Sequence[PolicySample], minimum: int) -> list[tuple[int, list[PolicySample]]]:
    """`samples` in groups that share an opening of at least `minimum` tokens, as (opening length, members),
    members in their input order; a sample that shares too little with the others is a group with opening 0."""
    if minimum < 1:
        raise LearnerError(f"a shared prefix needs a minimum length >= 1, got {minimum}")
    order = sorted(range(len(samples)), key=lambda i: samples[i].token_ids)
    groups: list[tuple[int, list[int]]] = []
    for i in order:
        if groups:
            length, members = groups[-1]
            first = samples[members[0]]
            shared = min(length, common_prefix(first.token_ids, samples[i].token_ids),
                         trainable_opening(samples[i]))
            if shared >= minimum:
                groups[-1] = (shared, [*members, i])
                continue
        groups.append((trainable_opening(samples[i]), [i]))
    out = []
    for length, members in groups:
        kept = length if len(members) > 1 and length >= minimum else 0
        out.append((kept, [samples[i] for i in sorted(members)]))
    return out


def suffix_sample(sample: PolicySample, opening: int) -> PolicySample:
    """`sample` from token `opening` on: what the suffix pass trains (grammar spans shifted with it)."""
    if opening <= 0:
        return sample
    if opening > trainable_opening(sample):
        raise LearnerError(f"an opening of {opening} tokens reaches a trained token's context")
    return PolicySample(sample.token_ids[opening:], sample.loss_mask[opening:], sample.old_logprobs[opening:],
                        sample.advantages[opening:], sample.policy_version,
                        tuple((start - opening, end - opening, grammar)
                              for start, end, grammar in sample.constraints))


class PrefixPass:
    """The opening's key/value cache (with its graph), lent to suffix micro-batches; `finish()` backpropagates
    what they sent to it."""

    def __init__(self, model: Any, token_ids: Sequence[int], device: Any, autocast: Any) -> None:
        self.token_ids = tuple(token_ids)
        self.length = len(token_ids)
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
        with autocast:
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, logits_to_keep=1)
        layers = getattr(out.past_key_values, "layers", None)
        if not layers or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
            raise LearnerError("a shared prefix needs a model whose cache is full attention in every layer "
                               "(set learner.shared_prefix=false for this model)")
        self._outputs = [t for layer in layers for t in (layer.keys, layer.values)]
        self._leaves = [t.detach().requires_grad_(t.requires_grad) for t in self._outputs]
        self.device = ids.device

    def inputs(self, attention_mask: torch.Tensor) -> dict[str, Any]:
        """Model keyword arguments for a suffix batch with `attention_mask` (rows, suffix length): the cache
        expanded over the rows and the attention mask over opening + suffix."""
        from transformers import DynamicCache

        rows = attention_mask.shape[0]
        pairs = [(self._leaves[i].expand(rows, -1, -1, -1), self._leaves[i + 1].expand(rows, -1, -1, -1))
                 for i in range(0, len(self._leaves), 2)]
        opening = torch.ones((rows, self.length), dtype=attention_mask.dtype, device=attention_mask.device)
        return {"past_key_values": DynamicCache(ddp_cache_data=pairs),
                "attention_mask": torch.cat([opening, attention_mask], dim=1)}

    def finish(self) -> None:
        """Backpropagate the gradients the suffixes left on the cache through the opening's pass."""
        pairs = [(out, leaf.grad) for out, leaf in zip(self._outputs, self._leaves, strict=True)
                 if out.requires_grad and leaf.grad is not None]
        if pairs:
            torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])
        self._outputs, self._leaves = [], []


class ReferenceOpenings:
    """The KL reference's own pass over the policy's current shared opening: made at the opening's first
    micro-batch, reused by its other micro-batches, dropped when the opening is done (`forget`)."""

    def __init__(self) -> None:
        self.opening: PrefixPass | None = None
        self.reference: PrefixPass | None = None

    def inputs(self, opening: PrefixPass | None, reference: Any, attention_mask: torch.Tensor, device: Any,
               autocast: Callable[[], Any]) -> dict[str, Any] | None:
        """The reference model's keyword arguments for a suffix micro-batch of `opening` (None: no opening)."""
        if opening is None:
            return None
        if self.opening is not opening:
            self.opening, self.reference = opening, PrefixPass(reference, opening.token_ids, device, autocast())
        assert self.reference is not None
        return self.reference.inputs(attention_mask)

    def forget(self) -> None:
        self.opening = self.reference = None
