"""Per-token log-probs (and entropies) of the trained tokens, without the whole batch's float32 logits.

A causal LM's last layer turns every position's hidden state into logits
over the vocabulary: for 8 sequences of 32k tokens and a 152k vocabulary that
is 78 GB in bfloat16 and twice that in float32, before the softmax. The
learner only needs, at each trained position (loss mask 1), the log-prob of
the next token and, for the metrics, the entropy. `token_stats` therefore
runs the model with the output layer swapped for a short function (for the
length of one call) that

- keeps the hidden states of the trained positions only (prompts and tool
  outputs carry no loss),
- projects them in chunks of `chunk` positions, each to float32 logits,
  divided by the temperature, masked by the grammar a token was sampled
  under (`constraints.GrammarRows`: packed bitmasks on the hidden states'
  device, unpacked one chunk at a time), then log-softmax, the target's
  log-prob and the entropy,
- recomputes each chunk in the backward pass (activation checkpointing), so
  at most one chunk of logits is alive at a time, in the forward pass and in
  the backward pass alike.

The swapped function runs inside the model's own forward pass, as the output
layer, so DeepSpeed's ZeRO-3 hooks gather and release its weight as usual.
Models that change the logits after the output layer (soft-capping, a logit
scale), or whose output layer is itself adapted by LoRA, take the plain path:
the whole batch's logits, as before (`chunk=0` forces it).
"""

from __future__ import annotations

from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner.constraints import GrammarRows, banned_chunk
from librarian.learner.errors import LearnerError
from librarian.learner.lora import hf_model

# config fields of models that transform the output layer's logits before returning them
POST_HEAD = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def chunkable(model: Any) -> bool:
    """Whether the output layer can be swapped for the chunked computation (see the module docstring)."""
    inner = hf_model(model)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear) or hasattr(head, "base_layer"):
        return False
    config = getattr(inner, "config", None)
    return not any(getattr(config, name, None) not in (None, 1, 1.0) for name in POST_HEAD)


def _stats(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
           temperature: float, banned: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """(rows, 2): log-prob of each row's target and the entropy, from float32 logits of `hidden` rows.

    `banned`: (constrained rows of this chunk, their packed allowed-token bitmask), unpacked here so a
    checkpointed chunk keeps only the packed form for its recomputation."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature
    if banned is not None:
        mask = banned_chunk(banned[0], banned[1], logits.shape[0], logits.shape[1])
        logits = logits.masked_fill(mask, torch.finfo(logits.dtype).min)
    logp = torch.log_softmax(logits, dim=-1)
    target = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # verl's form
    return torch.stack([target, entropy], dim=-1)


def chunked_stats(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                  temperature: float, chunk: int, banned: GrammarRows | None = None) -> torch.Tensor:
    """`_stats` of `hidden` (rows, H) in chunks of `chunk` rows, each recomputed in backward; (rows, 2).

    `banned`: the grammar masks of the rows sampled under a grammar (`constraints.disallowed_rows`), moved to
    `hidden`'s device if they are elsewhere."""
    starts = list(range(0, hidden.shape[0], chunk))
    if banned is not None:
        if banned.vocab != weight.shape[0]:
            raise LearnerError(f"grammar masks over {banned.vocab} tokens for an output layer of {weight.shape[0]}")
        banned = banned.to(hidden.device)
        cuts = banned.bounds([*starts, hidden.shape[0]])
    out = []
    for i, start in enumerate(starts):
        end = min(start + chunk, hidden.shape[0])
        ban = None
        if banned is not None and cuts[i + 1] > cuts[i]:
            ban = (banned.index[cuts[i]:cuts[i + 1]] - start, banned.allowed[cuts[i]:cuts[i + 1]])
        args = (hidden[start:end], weight, bias, targets[start:end], temperature, ban)
        if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
            out.append(torch.utils.checkpoint.checkpoint(_stats, *args, use_reentrant=False))
        else:
            out.append(_stats(*args))
    if not out:  # nothing trained here: an empty result that still belongs to the graph (backward runs)
        return hidden.new_zeros((0, 2), dtype=torch.float32) + 0.0 * hidden.sum()
    return torch.cat(out)


def token_stats(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, first: int,
                targets: torch.Tensor, rows: torch.Tensor, temperature: float, chunk: int,
                banned: GrammarRows | None = None, model_inputs: dict[str, Any] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and entropies (batch, columns) of `targets` at the `rows` (bool, batch x columns) positions.

    Column j predicts token `first + j + 1`; positions outside `rows` are 0 (they carry no loss). `banned`: the
    grammar masks of the selected rows (`constraints.disallowed_rows`). `model_inputs` go to the model too (a
    shared opening's cache and the attention mask over it: `shared_prefix.PrefixPass.inputs`).
    """
    inner = hf_model(model)
    head = inner.get_output_embeddings()
    keep = input_ids.shape[1] - first
    where = rows.nonzero(as_tuple=True)
    picked = targets[where]
    box: list[torch.Tensor] = []

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        selected = hidden[:, -keep:-1][where]
        stats = chunked_stats(selected, head.weight, head.bias, picked, temperature, chunk, banned)
        box.append(stats)
        return stats

    head.forward = forward  # an instance attribute shadows the class's forward for this call only
    try:
        inputs = {"attention_mask": attention_mask, **(model_inputs or {})}
        out = model(input_ids=input_ids, use_cache=False, logits_to_keep=keep, **inputs)
    finally:
        del head.forward
    if len(box) != 1:
        raise LearnerError(f"the output layer ran {len(box)} times in one forward pass; set "
                           "learner.logprob_chunk=0 for this model")
    stats = out.logits if isinstance(out.logits, torch.Tensor) and out.logits.shape == box[0].shape else None
    if stats is None:
        raise LearnerError("the model changed the output layer's result; set learner.logprob_chunk=0 for it")
    logp = torch.zeros(targets.shape, dtype=stats.dtype, device=stats.device)
    entropy = torch.zeros(targets.shape, dtype=stats.dtype, device=stats.device)
    logp = logp.index_put(where, stats[:, 0])
    entropy = entropy.index_put(where, stats[:, 1])
    return logp, entropy

