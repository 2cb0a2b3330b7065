"""The hf backend on a tiny random Llama: log-probs, seeds, stops, batching, rendering."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.models import BackendError, SamplingParams, make_backend

CONVS = [
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "A much longer question, so that the batch needs left padding here."}],
]


def _recompute(backend, sample, temperature: float, top_p: float) -> torch.Tensor:
    """The sampling distribution's log-prob of each generated token, from one plain forward pass."""
    ids = torch.tensor([list(sample.prompt_token_ids) + list(sample.token_ids)])
    with torch.no_grad():
        logits = backend.model(ids).logits[0].float()
    n = len(sample.prompt_token_ids)
    step = logits[n - 1: n - 1 + len(sample.token_ids)]
    if temperature > 0:
        step = step / temperature
        if top_p < 1:
            probs = torch.softmax(step, -1)
            sorted_p, order = probs.sort(-1, descending=True)
            outside = (sorted_p.cumsum(-1) - sorted_p) > top_p  # tokens after the nucleus is full
            step = step.masked_fill(torch.zeros_like(outside).scatter(1, order, outside), float("-inf"))
    return torch.log_softmax(step, -1).gather(1, torch.tensor(sample.token_ids)[:, None]).squeeze(1)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8), (0.0, 1.0)])
def test_logprobs_are_the_sampling_distributions(tiny, temperature, top_p):
    params = SamplingParams(n=2, max_new_tokens=10, temperature=temperature, top_p=top_p, seed=3)
    out = tiny.generate(CONVS, None, params)
    assert [len(row) for row in out] == [2, 2]
    for row in out:
        for sample in row:
            assert len(sample.token_ids) == len(sample.logprobs) > 0
            expected = _recompute(tiny, sample, temperature, top_p)
            assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4), (sample, expected)


def test_prompt_ids_are_the_rendered_template(tiny):
    sample = tiny.generate(CONVS[:1], None, SamplingParams(max_new_tokens=2, seed=0))[0][0]
    text = tiny.tokenizer.decode(list(sample.prompt_token_ids))
    assert text == tiny.render_prompt(CONVS[0])
    assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>") and text.endswith("<|im_start|>assistant\n")


def test_same_seed_same_samples_other_seed_differs(tiny):
    params = SamplingParams(n=2, max_new_tokens=12, seed=11)
    a = tiny.generate(CONVS, None, params)
    b = tiny.generate(CONVS, None, params)
    c = tiny.generate(CONVS, None, SamplingParams(n=2, max_new_tokens=12, seed=12))
    assert [[s.token_ids for s in r] for r in a] == [[s.token_ids for s in r] for r in b]
    assert [[s.token_ids for s in r] for r in a] != [[s.token_ids for s in r] for r in c]


def test_stop_string_ends_the_sample_and_stays_in_its_text(tiny):
    free = tiny.generate(CONVS[:1], None, SamplingParams(max_new_tokens=24, seed=5))[0][0]
    assert free.finish_reason == "length" and len(free.text) > 4
    stop = free.text[len(free.text) // 2: len(free.text) // 2 + 2]
    cut = tiny.generate(CONVS[:1], None, SamplingParams(max_new_tokens=24, seed=5, stop=(stop,)))[0][0]
    assert cut.finish_reason == "stop"
    assert cut.text.endswith(stop) and free.text.startswith(cut.text) and cut.text.count(stop) == 1
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)] and len(cut.token_ids) < len(free.token_ids)
    assert stop in tiny._decode(list(cut.token_ids)) and stop not in tiny._decode(list(cut.token_ids[:-1]))


def test_end_of_turn_token_finishes_and_is_kept(tiny):
    end = tiny.tokenizer.convert_tokens_to_ids("<|im_end|>")
    # make the end-of-turn token overwhelmingly likely by raising its logit in the model's output
    hook = tiny.model.lm_head.register_forward_hook(lambda _m, _i, out: out.index_fill(-1, torch.tensor([end]), 1e4))
    try:
        sample = tiny.generate(CONVS[:1], None, SamplingParams(max_new_tokens=8, seed=0))[0][0]
    finally:
        hook.remove()
    assert sample.token_ids == (end,) and sample.finish_reason == "stop" and sample.text == ""


def test_render_prompt_writes_tool_schemas_into_the_system_turn(tiny):
    tools = [{"type": "function", "function": {"name": "search", "description": "find",
                                               "parameters": {"type": "object", "properties": {}}}}]
    text = tiny.render_prompt(CONVS[0], tools)
    system = text.split("<|im_end|>")[0]
    assert "You are terse." in system and '"name": "search"' in system and "<tool_call>" in system


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(BackendError, match="'smollm2', 'tiny' or an existing folder"):
        make_backend("hf", model="/no/such/model")
