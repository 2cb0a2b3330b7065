"""The torch learner on a tiny random Llama: updates, weight publishing to a rollout backend, accumulation."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.learner import (
    DeepSpeedConfig,
    Learner,
    LearnerConfig,
    LearnerError,
    LoraConfig,
    LossConfig,
    load_weights,
)
from librarian.learner.losses import token_logprobs
from librarian.models import SamplingParams
from librarian.models.hf import tiny_llama
from tests.learner.conftest import random_samples, tiny_model

LORA = LoraConfig(rank=4, alpha=8)


def make(pad_id, **kw):
    cfg = LearnerConfig(lr=kw.pop("lr", 5e-3), lora=kw.pop("lora", LORA), **kw)
    return Learner(tiny_model(0), cfg, pad_id=pad_id)


def seq_logprobs(model, sample):
    ids = torch.tensor([sample.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
    lp = token_logprobs(logits, ids[:, 1:])[0]
    return lp[torch.tensor(sample.loss_mask[1:]).bool()]


def test_a_step_is_finite_changes_the_adapter_and_advances_the_version(pad_id):
    learner = make(pad_id)
    before = {k: v.clone() for k, v in learner.publish_weights()[1].state.items()}
    assert learner.publish_weights()[0] == 0
    metrics = learner.step(random_samples(4))
    for key in ("loss", "pg_loss", "entropy", "kl", "grad_norm", "tokens_per_s", "pg_clipfrac"):
        assert torch.isfinite(torch.tensor(metrics[key])), key
    assert metrics["grad_norm"] > 0 and metrics["entropy"] > 0 and metrics["tokens_per_s"] > 0
    version, payload = learner.publish_weights()
    assert version == 1 == metrics["version"] and payload.kind == "lora"
    assert any(not torch.equal(before[k], payload.state[k]) for k in before)
    learner.step(random_samples(4))
    assert learner.publish_weights()[0] == 2


def test_the_update_follows_the_sign_of_the_advantage(pad_id):
    learner = make(pad_id, lr=2e-2)
    samples = random_samples(2)  # sample 0: advantage +1, sample 1: advantage -1
    before = [seq_logprobs(learner.model, s).sum() for s in samples]
    for _ in range(3):
        learner.step(samples)
    after = [seq_logprobs(learner.model, s).sum() for s in samples]
    assert after[0] > before[0] and after[1] < before[1]


def test_sequence_logprobs_sum_each_samples_trained_tokens(pad_id):
    learner = make(pad_id)
    samples = random_samples(3)
    expected = [float(seq_logprobs(learner.model, s).sum()) for s in samples]
    assert learner.sequence_logprobs(samples) == pytest.approx(expected, abs=1e-4)
    learner.step(samples)
    moved = learner.sequence_logprobs(samples)
    assert moved[0] > expected[0] and moved[1] < expected[1]  # advantages +1, -1, +1


def test_a_rollout_backend_that_loads_the_published_adapter_computes_what_the_learner_computes(pad_id):
    learner = make(pad_id, lr=2e-2)
    rollout = tiny_llama(seed=0)
    sample = random_samples(1)[0]
    assert torch.allclose(seq_logprobs(rollout.model, sample), seq_logprobs(learner.model, sample), atol=1e-5)
    start = seq_logprobs(rollout.model, sample)
    learner.step(random_samples(4))
    version, payload = learner.publish_weights()
    assert load_weights(rollout, payload) == version == rollout.policy_version
    learner.model.eval()
    loaded = seq_logprobs(rollout.model, sample)
    assert not torch.allclose(loaded, start, atol=1e-4)
    assert torch.allclose(loaded, seq_logprobs(learner.model, sample), atol=1e-5)
    out = rollout.generate([[{"role": "user", "content": "hello"}]], None,
                           SamplingParams(max_new_tokens=4, temperature=0.0))[0][0]
    assert len(out.token_ids) >= 1 and all(lp <= 0 for lp in out.logprobs)
    with pytest.raises(LearnerError, match="already loaded"):
        load_weights(rollout, type(payload)(version - 1, payload.kind, payload.state, payload.lora))


def test_full_weights_are_published_and_loaded_without_lora(pad_id):
    learner = make(pad_id, lora=LoraConfig(enabled=False), lr=1e-3)
    learner.step(random_samples(2))
    version, payload = learner.publish_weights()
    assert payload.kind == "full" and version == 1
    rollout = tiny_llama(seed=0)
    load_weights(rollout, payload)
    learner.model.eval()
    sample = random_samples(1, seed=3)[0]
    assert torch.allclose(seq_logprobs(rollout.model, sample), seq_logprobs(learner.model, sample), atol=1e-5)


def test_a_merged_lora_is_published_as_full_weights_a_plain_model_computes_as_the_learner(pad_id):
    """publish=merged folds W + alpha/rank B A into full weights: a rollout model without LoRA then gives the
    learner's log-probs, and publishing leaves the learner's own weights as they were."""
    learner = make(pad_id, lora=LoraConfig(rank=4, alpha=8, publish="merged"), lr=2e-2)
    learner.step(random_samples(4))
    base_before = {k: v.clone() for k, v in learner.model.get_base_model().state_dict().items()}
    version, payload = learner.publish_weights()
    assert payload.kind == "full" and version == 1 and payload.lora == {}
    assert not any(".lora_" in k or "base_layer" in k for k in payload.state)
    after = learner.model.get_base_model().state_dict()
    assert all(torch.equal(base_before[k], after[k]) for k in base_before)
    rollout = tiny_llama(seed=0)
    sample = random_samples(1, seed=5)[0]
    start = seq_logprobs(rollout.model, sample)
    assert load_weights(rollout, payload) == 1
    learner.model.eval()
    loaded = seq_logprobs(rollout.model, sample)
    assert not torch.allclose(loaded, start, atol=1e-4)  # the control: the adapter moved the policy
    assert torch.allclose(loaded, seq_logprobs(learner.model, sample), atol=1e-5)


def test_a_checkpoint_resumes_whichever_way_the_adapter_is_published(pad_id, tmp_path):
    adapter = make(pad_id)
    adapter.step(random_samples(4))
    adapter.save(tmp_path / "ckpt")
    merged = make(pad_id, lora=LoraConfig(rank=4, alpha=8, publish="merged"))
    merged.load(tmp_path / "ckpt")
    assert merged.version == adapter.version
    with pytest.raises(LearnerError, match="lora"):
        make(pad_id, lora=LoraConfig(rank=8, alpha=8)).load(tmp_path / "ckpt")


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_gradient_accumulation_gives_the_same_update_as_one_batch(pad_id, agg):
    samples = random_samples(4)
    states = []
    for accum in (1, 3):  # 4 samples in 3 uneven micro-batches
        learner = make(pad_id, grad_accum=accum, loss=LossConfig(agg_mode=agg))
        m = learner.step(samples)
        states.append((learner.publish_weights()[1].state, m["loss"], m["grad_norm"]))
    for state, loss, norm in states[1:]:
        assert loss == pytest.approx(states[0][1], rel=1e-4, abs=1e-6)
        assert norm == pytest.approx(states[0][2], rel=1e-3)
        for k, v in state.items():
            assert torch.allclose(v, states[0][0][k], atol=1e-6), k


def test_kl_to_the_reference_is_zero_at_first_and_grows(pad_id):
    learner = make(pad_id, lr=2e-2, loss=LossConfig(kl_coef=0.1, kl_type="low_var_kl"))
    first = learner.step(random_samples(4))
    second = learner.step(random_samples(4))
    assert first["kl"] == pytest.approx(0.0, abs=1e-7) and second["kl"] > 1e-8


def test_bad_config_and_input_are_named(pad_id):
    with pytest.raises(LearnerError, match="target_modules"):
        make(pad_id, lora=LoraConfig(rank=4, alpha=8, target_modules=["nope_proj"]))
    with pytest.raises(LearnerError, match="learner.engine"):
        LearnerConfig(engine="jax")
    with pytest.raises(LearnerError, match="max_tokens_per_micro_batch"):
        LearnerConfig(max_tokens_per_micro_batch=-1)
    with pytest.raises(LearnerError, match="learner.lora.publish"):
        LearnerConfig(lora=LoraConfig(publish="folded"))
    with pytest.raises(LearnerError, match="ZeRO-3"):
        LearnerConfig(engine="deepspeed", lora=LoraConfig(publish="merged"), deepspeed=DeepSpeedConfig(zero_stage=3))
    with pytest.raises(LearnerError, match="learner.precision"):
        LearnerConfig(precision="fp16")
    learner = make(pad_id, grad_accum=3)
    with pytest.raises(LearnerError, match="at least one"):
        learner.step([])


def test_fewer_samples_than_grad_accum_is_the_same_update(pad_id):
    """grad_accum is at most: a batch smaller than it (an SFT epoch's last) runs one sample per micro-batch."""
    states = []
    for accum in (1, 3):
        learner = make(pad_id, grad_accum=accum)
        learner.step(random_samples(2))
        states.append(learner.publish_weights()[1].state)
    assert all(torch.allclose(states[0][k], states[1][k], atol=1e-6) for k in states[0])


@pytest.mark.parametrize("lora", [LoraConfig(enabled=False), LoraConfig(rank=4, alpha=8)])
def test_gradient_checkpointing_gives_the_same_step(pad_id, lora):
    """Checkpointing recomputes activations; the loss and the update are those of the plain step."""
    plain = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=lora), pad_id)
    ckpt = Learner(tiny_model(0), LearnerConfig(lr=1e-2, lora=lora, gradient_checkpointing=True), pad_id)
    a, b = plain.step(random_samples(4)), ckpt.step(random_samples(4))
    assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-5
    sa, sb = plain.publish_weights()[1].state, ckpt.publish_weights()[1].state
    assert sa.keys() == sb.keys() and all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def test_a_large_eps_makes_the_first_step_follow_the_gradients_size_not_its_sign(pad_id):
    """Adam's first step moves every weight by about lr whatever its gradient (its sign); with an eps far above the
    gradients the step is lr / eps times the gradient instead (SGD-like), so weights with tiny, noisy gradients
    barely move. The full-weights learner shows it on every parameter."""
    samples = random_samples(4)
    moved = {}
    for eps in (1e-8, 10.0):
        learner = make(pad_id, lr=1e-3, eps=eps, lora=LoraConfig(enabled=False))
        before = [p.detach().clone() for p in learner.engine.params]
        learner.step(samples)
        moved[eps] = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(learner.engine.params, before,
                                                                                  strict=True)])
    sign_like, sized = moved[1e-8], moved[10.0]
    assert float(sign_like.max()) == pytest.approx(1e-3, rel=0.05)  # every weight with a gradient moves ~lr
    assert float(sign_like.median()) > 0.5e-3
    assert float(sized.max()) < 1e-4 and float(sized.median()) < 1e-3 * float(sign_like.median())
    with pytest.raises(LearnerError, match="learner.eps must be > 0"):
        make(pad_id, eps=0.0)


def test_a_loaded_checkpoint_keeps_its_moments_but_takes_this_configs_hyperparameters(pad_id, tmp_path):
    saved = make(pad_id, lr=1e-3)
    saved.step(random_samples(2))
    saved.save(tmp_path / "ckpt")
    loaded = make(pad_id, lr=3e-4, eps=1e-4, betas=[0.5, 0.9])
    loaded.load(tmp_path / "ckpt")
    group = loaded.engine.optimizer.param_groups[0]
    assert (group["lr"], group["eps"], tuple(group["betas"])) == (3e-4, 1e-4, (0.5, 0.9))
    state = loaded.engine.optimizer.state
    assert state and all(int(s["step"]) == 1 for s in state.values())  # the saved moments came back
