"""The KL reference policy: the initial policy until `freeze_reference()`, the SFT policy after SFT (paper 002),
frozen during GRPO, kept by checkpoints; LoRA (a frozen second adapter) and full weights (a frozen copy)."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.cluster.learner_actor import LearnerActor
from librarian.learner import (
    DeepSpeedConfig,
    Learner,
    LearnerConfig,
    LoraConfig,
    LossConfig,
    PolicySample,
    lora,
)
from librarian.learner.sft import fine_tune
from tests.learner.conftest import random_samples, tiny_model

LORA = LoraConfig(rank=4, alpha=8)
FULL = LoraConfig(enabled=False)
KL = LossConfig(kl_coef=0.1, kl_type="low_var_kl")


def make(pad_id, lora_cfg=LORA, loss=KL, engine="torch", **kw):
    lr = kw.pop("lr", 5e-2 if lora_cfg.enabled else 1e-2)
    cfg = LearnerConfig(engine=engine, lr=lr, lora=lora_cfg, loss=loss, **kw)
    return Learner(tiny_model(0), cfg, pad_id=pad_id)


def sft_samples():
    """Verified-trajectory style samples (advantage 1 on generated tokens)."""
    return [PolicySample(s.token_ids, s.loss_mask, s.old_logprobs, tuple(float(m) for m in s.loss_mask))
            for s in random_samples(4, seed=3)]


def reference_state(learner) -> dict[str, torch.Tensor]:
    if learner.cfg.lora.enabled:
        return lora.adapter_state(learner._peft(), lora.REFERENCE)
    return {k: v.detach().clone() for k, v in learner.reference.model.state_dict().items()}


def trainable_ids(learner) -> set[int]:
    opt = learner.engine.optimizer
    return {id(p) for group in opt.param_groups for p in group["params"]}


BATCH = random_samples(4, seed=7)


def test_before_any_freeze_the_reference_is_the_initial_policy(pad_id):
    learner = make(pad_id)
    learner.step(random_samples(4, seed=1))
    kl = learner.reference_kl(BATCH)
    assert kl > 0 and kl == pytest.approx(learner.reference_kl(BATCH, base=True), abs=1e-9)


@pytest.mark.parametrize("lora_cfg", [LORA, FULL], ids=["lora", "full"])
def test_after_sft_the_reference_is_the_fine_tuned_policy_and_stays_frozen_during_grpo(pad_id, lora_cfg):
    learner = make(pad_id, lora_cfg)
    initial = {k: v.clone() for k, v in learner.engine.trainable_state().items()}
    history = fine_tune(learner, sft_samples(), epochs=2, batch_size=2, progress=False)
    assert len(history) == 4 and learner.reference_frozen
    moved = learner.engine.trainable_state()
    assert any(not torch.equal(initial[k], moved[k]) for k in initial)  # SFT moved the weights

    assert abs(learner.reference_kl(BATCH)) < 1e-6
    if lora_cfg.enabled:
        assert learner.reference_kl(BATCH, base=True) > 1e-4  # the base model is not the reference any more

    ref_before = reference_state(learner)
    ref_ids = {id(p) for p in (learner.reference.model.parameters() if not lora_cfg.enabled else
                                (p for n, p in learner._peft().named_parameters() if f".{lora.REFERENCE}." in n))}
    assert ref_ids and not ref_ids & trainable_ids(learner)  # the optimizer never sees the reference
    metrics = learner.step(random_samples(4, seed=1))
    assert abs(metrics["kl"]) < 1e-6  # the first GRPO step starts at the reference
    assert learner.reference_kl(BATCH) > 1e-6  # ... and moves away from it
    for k, v in reference_state(learner).items():
        assert torch.equal(v, ref_before[k]), k
    if lora_cfg.enabled:
        peft = learner._peft()
        assert peft.active_adapter == lora.TRAINED  # the trained adapter stays the active, trainable one
        assert all(p.requires_grad == (f".{lora.TRAINED}." in n) for n, p in peft.named_parameters() if "lora_" in n)
        assert set(learner.publish_weights()[1].state) == set(initial)  # only the trained adapter is published
    second = learner.step(random_samples(4, seed=2))
    assert second["kl"] > 1e-6


@pytest.mark.parametrize("lora_cfg", [LORA, FULL], ids=["lora", "full"])
def test_a_checkpoint_keeps_the_reference(pad_id, lora_cfg, tmp_path):
    learner = make(pad_id, lora_cfg)
    fine_tune(learner, sft_samples(), epochs=2, batch_size=2, progress=False)
    learner.step(random_samples(4, seed=1))
    want = learner.reference_kl(BATCH)
    assert want > 1e-6
    folder = learner.save(tmp_path / "ckpt")

    resumed = make(pad_id, lora_cfg)
    assert not resumed.reference_frozen
    resumed.load(folder)
    assert resumed.reference_frozen
    assert resumed.reference_kl(BATCH) == want
    want_state = reference_state(learner)
    for k, v in reference_state(resumed).items():
        assert torch.equal(v.cpu(), want_state[k].cpu()), k
    # both go on identically, the reference included
    assert resumed.step(random_samples(4, seed=2))["kl"] == pytest.approx(
        learner.step(random_samples(4, seed=2))["kl"], rel=1e-6, abs=1e-9)


def test_a_checkpoint_before_freezing_keeps_the_initial_reference(pad_id, tmp_path):
    learner = make(pad_id)
    learner.step(random_samples(4, seed=1))
    folder = learner.save(tmp_path / "ckpt")
    resumed = make(pad_id)
    fine_tune(resumed, sft_samples(), epochs=1, batch_size=2, progress=False)
    assert resumed.reference_frozen
    resumed.load(folder)
    assert not resumed.reference_frozen
    assert resumed.reference_kl(BATCH) == pytest.approx(learner.reference_kl(BATCH, base=True), abs=1e-9)


def test_a_reference_equal_to_the_base_gives_the_same_update_as_disabling_the_adapters(pad_id):
    """Switching to the reference adapter and back leaves the policy's gradients alone."""
    plain, frozen = make(pad_id, lr=1e-2), make(pad_id, lr=1e-2)
    frozen.freeze_reference()  # adapters start as the identity: this reference is the base model
    for seed in (1, 2):
        a, b = plain.step(random_samples(4, seed=seed)), frozen.step(random_samples(4, seed=seed))
        for key in ("loss", "kl", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-8), key
    want = plain.publish_weights()[1].state
    for k, v in frozen.publish_weights()[1].state.items():
        assert torch.allclose(v, want[k], atol=1e-6), k


def test_without_kl_no_reference_is_kept(pad_id):
    for lora_cfg in (LORA, FULL):
        learner = make(pad_id, lora_cfg, loss=LossConfig())
        fine_tune(learner, sft_samples(), epochs=1, batch_size=2, progress=False)
        assert not learner.reference_frozen and learner.reference.model is None
        if lora_cfg.enabled:
            assert not lora.has_adapter(learner._peft(), lora.REFERENCE)


def test_full_weights_with_kl_train(pad_id):
    learner = make(pad_id, FULL, lr=1e-3)
    metrics = [learner.step(random_samples(4, seed=s)) for s in (1, 2)]
    assert all(torch.isfinite(torch.tensor(m["loss"])) for m in metrics)
    assert metrics[0]["kl"] == pytest.approx(0.0, abs=1e-7) and metrics[1]["kl"] > 0


def test_the_learner_actor_sft_freezes_the_reference():
    """Both pipelines' warm starts go through `LearnerActor.sft`."""
    actor = LearnerActor("hf", {"model": "tiny", "seed": 0}, LearnerConfig(lr=5e-2, lora=LORA, loss=KL))
    assert not actor.learner.reference_frozen
    history = actor.sft(sft_samples(), epochs=1, batch_size=2)
    assert len(history) == 2 and actor.learner.reference_frozen
    assert abs(actor.learner.reference_kl(BATCH)) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("lora_cfg", [LORA, FULL], ids=["lora", "full"])
def test_the_reference_under_deepspeed(pad_id, lora_cfg, stage, tmp_path):
    """ZeRO-2 and ZeRO-3 (gloo, one CPU rank); stage 0 is left out: its grad norm comes back as None (nan)."""
    ds = DeepSpeedConfig(zero_stage=stage)
    learner = make(pad_id, lora_cfg, engine="deepspeed", deepspeed=ds)
    fine_tune(learner, sft_samples(), epochs=2, batch_size=2, progress=False)
    assert abs(learner.reference_kl(BATCH)) < 1e-6
    ref_before = reference_state(learner)
    assert abs(learner.step(random_samples(4, seed=1))["kl"]) < 1e-6
    want = learner.reference_kl(BATCH)
    assert want > 1e-6
    for k, v in reference_state(learner).items():
        assert torch.equal(v, ref_before[k]), k
    folder = learner.save(tmp_path / "ckpt")
    resumed = make(pad_id, lora_cfg, engine="deepspeed", deepspeed=ds)
    resumed.load(folder)
    assert resumed.reference_frozen and resumed.reference_kl(BATCH) == want
