"""The learner's memory levers on the tiny model: chunked log-probs, token-budget micro-batches, bf16 compute
with float32 master weights. Each gives the update of the plain computation; the chunked path never makes a
tensor the size of the batch's logits."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: TID253

from librarian.learner import Learner, LearnerConfig, LoraConfig, LossConfig, PolicySample
from librarian.learner.batch import collate, micro_batches, padded_tokens, spread
from librarian.learner.losses import token_logprobs
from tests.learner.conftest import tiny_model

LORA = LoraConfig(rank=4, alpha=8)


class LargestTensor(TorchDispatchMode):
    """The largest number of elements of any new tensor (not a view) an operator returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:  # views are not new
                self.largest = max(self.largest, t.numel())
        return out


def mixed_samples(n: int = 6, seed: int = 0):
    """Samples of different lengths (a prompt, then 4 to 14 generated tokens)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = 5 + 4 + (i * 5) % 11
        ids = torch.randint(0, 2000, (length,), generator=g).tolist()
        mask = [0] * 5 + [1] * (length - 5)
        adv = [(1.0 if i % 2 else -0.5) * m for m in mask]
        out.append(PolicySample(tuple(ids), tuple(mask), tuple(-10.8 * m for m in mask), tuple(adv)))
    return out


def learner(pad_id, **kw) -> Learner:
    return Learner(tiny_model(0), LearnerConfig(lr=kw.pop("lr", 1e-2), lora=kw.pop("lora", LORA), **kw), pad_id)


def step_gradients(model: Learner, samples) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One real `step`, and the accumulated gradients its optimizer update starts from (AdamW's first step
    divides by |g|, so compare gradients: a 1e-12 gradient and a 1e-13 one give equally large updates)."""
    seen: dict[str, torch.Tensor] = {}
    update = model.engine.step

    def record() -> float:
        seen.update({n: p.grad.clone() for n, p in model.model.named_parameters() if p.grad is not None})
        return update()

    model.engine.step = record
    metrics = model.step(samples)
    return metrics, seen


def largest_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.parametrize("lora", [LORA, LoraConfig(enabled=False)], ids=["lora", "full"])
def test_chunked_logprobs_equal_the_whole_batch_ones(pad_id, lora):
    samples = mixed_samples()
    whole = learner(pad_id, lora=lora, logprob_chunk=0)
    chunked = learner(pad_id, lora=lora, logprob_chunk=5)
    assert chunked.chunked and not whole.chunked
    batch = collate(samples, pad_id)
    t, first = whole._targets(batch)
    with torch.no_grad():
        a_logp, a_ent = whole.token_stats(batch, t, first)
        b_logp, b_ent = chunked.token_stats(batch, t, first)
        direct = token_logprobs(whole.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
                                .logits[:, first:-1], t["ids"])
    mask = t["mask"] > 0
    assert float((a_logp - b_logp)[mask].abs().max()) < 1e-6
    assert float((a_ent - b_ent)[mask].abs().max()) < 1e-6
    assert float((direct - b_logp)[mask].abs().max()) < 1e-6
    assert float(b_logp[~mask].abs().max()) == 0.0  # untrained positions are never projected
    # and the gradient through the chunks (recomputed in backward) is that of the whole batch's logits
    (ma, ga), (mb, gb) = step_gradients(whole, samples), step_gradients(chunked, samples)
    assert abs(ma["loss"] - mb["loss"]) < 1e-6 and abs(ma["entropy"] - mb["entropy"]) < 1e-6
    assert largest_difference(ga, gb) < 1e-6


def test_the_chunked_path_never_builds_the_batchs_logits(pad_id):
    samples = mixed_samples()
    batch = collate(samples, pad_id)
    vocab = tiny_model(0).config.vocab_size
    full_logits = batch.input_ids.shape[0] * (batch.input_ids.shape[1] - 1) * vocab
    sizes = {}
    for chunk in (0, 4):
        model = learner(pad_id, logprob_chunk=chunk)
        with LargestTensor() as seen:
            model.step(samples)
        sizes[chunk] = seen.largest
    assert sizes[0] >= full_logits // 2  # the plain path: logits from the first trained column on
    assert sizes[4] <= 4 * vocab  # the chunked path: one chunk of 4 positions at a time
    assert sizes[4] * 10 < sizes[0]


def test_token_budget_micro_batches_hold_every_sample_once_within_the_budget():
    samples = mixed_samples(9, seed=3)
    for budget in (1, 20, 40, 80, 10_000):
        parts = micro_batches(samples, grad_accum=1, max_tokens=budget)
        flat = [s for p in parts for s in p]
        assert sorted(map(id, flat)) == sorted(map(id, samples))
        assert all(padded_tokens(p) <= budget or len(p) == 1 for p in parts)
    assert len(micro_batches(samples, 1, 10_000)) == 1 and len(micro_batches(samples, 1, 1)) == 9
    assert [len(p) for p in micro_batches(samples, grad_accum=4)] == [3, 2, 2, 2]
    assert [len(p) for p in micro_batches(samples[:2], grad_accum=4)] == [1, 1]  # never an empty part
    more = spread(micro_batches(samples, 1, 10_000), 4)
    assert len(more) == 4 and sorted(map(id, [s for p in more for s in p])) == sorted(map(id, samples))
    assert len(spread([[samples[0]], [samples[1]]], 5)) == 2  # one sample a part: nothing left to split


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_token_budget_gives_the_gradient_of_one_batch(pad_id, agg):
    samples = mixed_samples(7, seed=1)
    one = learner(pad_id, loss=LossConfig(agg_mode=agg))
    budgeted = learner(pad_id, loss=LossConfig(agg_mode=agg), max_tokens_per_micro_batch=40)
    assert len(budgeted.micro_batches(samples)) >= 3
    (ma, ga), (mb, gb) = step_gradients(one, samples), step_gradients(budgeted, samples)
    assert abs(ma["loss"] - mb["loss"]) < 1e-6 and abs(ma["grad_norm"] - mb["grad_norm"]) < 1e-6
    assert largest_difference(ga, gb) < 1e-6
    sa, sb = one.publish_weights()[1].state, budgeted.publish_weights()[1].state
    assert largest_difference(sa, sb) < 1e-6  # LoRA's gradients are not near zero: the updates agree too


def test_bf16_keeps_float32_master_weights_and_small_updates(pad_id):
    """A bf16-loaded model trains with float32 parameters under bf16 autocast; lr 1e-6 still moves them,
    which pure bf16 weights cannot (the control: the same step rounded back to bf16 is no change at all)."""
    model = tiny_model(0).to(torch.bfloat16)
    bf16 = Learner(model, LearnerConfig(lr=1e-6, lora=LoraConfig(enabled=False), precision="bf16"), pad_id)
    params = [p for p in bf16.model.parameters() if p.requires_grad]
    assert params and all(p.dtype == torch.float32 for p in params)
    before = {k: v.clone() for k, v in bf16.model.state_dict().items()}
    with bf16.engine.autocast():  # the forward runs in bf16: autocast's matmuls
        out = bf16.model(input_ids=torch.tensor([[1, 2, 3]]))
    assert out.logits.dtype == torch.bfloat16
    bf16.step(mixed_samples(4))
    after = bf16.model.state_dict()
    moved = max(float((after[k] - before[k]).abs().max()) for k in before)
    assert 1e-7 < moved < 1e-5
    big = {k: before[k].abs() > 1e-3 for k in before}  # bf16's spacing there exceeds twice the update
    rounded = max(float((after[k].bfloat16().float() - before[k].float())[big[k]].abs().max()) for k in before)
    assert rounded == 0.0  # as pure bf16 weights, none of them would have moved


def test_fp32_precision_casts_a_bf16_model_to_float32(pad_id):
    model = tiny_model(0).to(torch.bfloat16)
    fp32 = Learner(model, LearnerConfig(lora=LORA, precision="fp32"), pad_id)
    assert {p.dtype for p in fp32.model.parameters()} == {torch.float32}


def test_a_micro_batch_without_trained_tokens_still_steps(pad_id):
    """A sample whose loss mask is all 0 (nothing generated) alone in a micro-batch: no positions to project,
    and the step is that of the other samples."""
    idle = PolicySample(tuple(range(10, 20)), (0,) * 10, (0.0,) * 10, (0.0,) * 10)
    samples = mixed_samples(3)
    (m_with, g_with), (m_without, g_without) = (step_gradients(learner(pad_id, grad_accum=4), [idle, *samples]),
                                                step_gradients(learner(pad_id, grad_accum=3), samples))
    assert abs(m_with["loss"] - m_without["loss"]) < 1e-6 and largest_difference(g_with, g_without) < 1e-6
