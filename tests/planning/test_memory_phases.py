"""The learner's memory estimate (`memory_estimate`) against real updates measured on the CPU, phase by phase,
within the bounds the GPU check uses (0.75..1.25).

The measurement is `memory_meter` on the CPU: torch's profiler with `profile_memory` hears every call to torch's
CPU allocator and every free, with its size, and that allocator keeps no cache, so the events summed in time
order are the bytes alive at each moment, temporaries inside an operator included (the first test shows it on
known allocations). The layer tests check the estimate's rule for what autograd keeps (a frozen projection's
input only where something else reads it) to within 2%; the update tests check each wide phase and the peak.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: TID253
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: TID253

from librarian.learner import Learner, LearnerConfig, LoraConfig, PolicySample, collate, constraints
from librarian.learner.config import LossConfig
from librarian.learner.constraints import GrammarRows, banned_chunk
from librarian.learner.logprobs import chunked_stats
from librarian.pipelines.plan_command import load_job
from librarian.planning.activation_memory import Chunk
from librarian.planning.cluster_file import load_cluster
from librarian.planning.job_plan import actors, place_job
from librarian.planning.memory_check import fit
from librarian.planning.memory_estimate import LearnerMemory, MicroBatch, learner_memory, planned_batch
from librarian.planning.memory_meter import PhaseMeter, expected, measured, measured_update
from librarian.planning.model_shape import KNOWN, ModelShape

ROOT = Path(__file__).resolve().parents[2]
BOUNDS = (0.75, 1.25)
SHAPE = ModelShape("small", 2, 256, 8, 2, 1376, 16000)  # Qwen2's proportions: GQA, a wide MLP, a large vocab
MIB = 1 << 20


def model(shape: ModelShape, layers: int, dtype: torch.dtype) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, tie_word_embeddings=shape.tied,
                         max_position_embeddings=4096)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(dtype)


def samples(count: int, length: int, vocab: int, shorter: int = 0, spans: tuple = ()) -> list[PolicySample]:
    """Random rows of `length` tokens (the last `shorter` tokens shorter), trained after the first token."""
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(count):
        n = length - (shorter if i == count - 1 else 0)
        ids = tuple(torch.randint(1, vocab, (n,), generator=g).tolist())
        mask = (0,) + (1,) * (n - 1)
        out.append(PolicySample(ids, mask, tuple(-math.log(vocab) * m for m in mask),
                                tuple((1.0 if i % 2 else -1.0) * m for m in mask),
                                constraints=tuple((s, e, "g") for s, e in spans)))
    return out


class HalfGrammar:
    """Stands in for xgrammar's replay: a random half of the vocabulary allowed, always the sampled token."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def replay_bitmask(self, grammar: str, token_ids) -> torch.Tensor:
        g = torch.Generator().manual_seed(len(token_ids))
        bits = torch.randint(-(1 << 31), 1 << 31, (len(token_ids), (self.vocab + 31) // 32), generator=g)
        bits = bits.to(torch.int32)
        for i, tok in enumerate(token_ids):
            bits[i, tok // 32] |= torch.tensor(1 << (tok % 32)).to(torch.int32)
        return bits


def learner(shape: ModelShape, layers: int, precision: str, lora: str, checkpointed: bool, tokens: int,
            kl: float = 0.0) -> tuple[Learner, LearnerConfig]:
    """`lora`: 'attention' (q, k, v, o), 'all' (every projection) or 'off' (full weights)."""
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"] + (["gate_proj", "up_proj", "down_proj"] if lora == "all"
                                                          else [])
    cfg = LearnerConfig(precision=precision, gradient_checkpointing=checkpointed, logprob_chunk=128, lr=1e-4,
                        max_tokens_per_micro_batch=tokens, loss=LossConfig(kl_coef=kl),
                        lora=LoraConfig(enabled=lora != "off", rank=8, alpha=16, target_modules=targets))
    return Learner(model(shape, layers, torch.bfloat16 if precision == "bf16" else torch.float32), cfg,
                   tokenizer="half-grammar"), cfg


# --- the meter ------------------------------------------------------------------------------------------------
def test_the_cpu_meter_sees_every_allocation_and_an_operators_temporaries():
    before = torch.empty(2 * MIB, dtype=torch.uint8)
    x = torch.randn(256, 4096)  # 4 MiB
    with PhaseMeter("cpu") as meter:
        a = torch.empty(MIB, dtype=torch.uint8)
        b = torch.empty(3 * MIB, dtype=torch.uint8)
        del a
        meter.mark("second")
        c = torch.empty(2 * MIB, dtype=torch.uint8)
        del b, c
        meter.mark("third")
        torch.logsumexp(x, dim=-1)  # x - max: one temporary as large as x, inside the operator
        del before  # allocated before the start: the profiler does not report its free
    assert meter.peaks["forward"] == 4 * MIB and meter.peaks["second"] == 5 * MIB
    assert 4 * MIB <= meter.peaks["third"] < 4 * MIB + 64 * 1024
    assert meter.alive == 0 and meter.peak == 5 * MIB


# --- one layer: what autograd keeps ---------------------------------------------------------------------------
@pytest.mark.parametrize("precision, lora", [("bf16", "attention"), ("fp32", "attention"), ("bf16", "all"),
                                             ("bf16", "off"), ("fp32", "off")])
def test_a_layer_keeps_what_the_estimate_says(precision, lora):
    """The bytes a forward pass leaves for backward, 2 layers against 1 (no checkpointing): with LoRA on the
    attention only, the frozen MLP keeps its activations but none of its projections' inputs."""
    rows, length = 2, 256
    kept = {}
    for layers in (1, 2):
        lrn, cfg = learner(SHAPE, layers, precision, lora, False, rows * length)
        part = samples(rows, length, SHAPE.vocab)
        batch = collate(part, 0)
        t, first = lrn._targets(batch)
        _, meter = measured("cpu", lambda lrn=lrn, batch=batch, t=t, first=first: lrn.token_stats(batch, t, first))
        kept[layers] = meter.alive
        est = learner_memory(SHAPE.cut(layers), cfg, MicroBatch(rows * length, length, padded=False))
        casts = est.parts["logprobs"].get("autocast weight copies", 0.0)
        kept_est = (est.parts["logprobs"]["layers' kept tensors"] + casts) * (1 << 30)
        if layers == 2:
            one = learner_memory(SHAPE.cut(1), cfg, MicroBatch(rows * length, length, padded=False))
            kept_est -= (one.parts["logprobs"]["layers' kept tensors"]
                         + one.parts["logprobs"].get("autocast weight copies", 0.0)) * (1 << 30)
    measured_layer = kept[2] - kept[1]
    assert measured_layer == pytest.approx(kept_est, rel=0.02)


# --- whole updates, by phase ----------------------------------------------------------------------------------
def update_peaks(shape, layers, precision, lora, checkpointed, rows=2, length=512, shorter=0, kl=0.0,
                 spans=()) -> tuple[dict[str, int], dict[str, float], LearnerMemory]:
    """(measured, expected) bytes by phase of an update of two micro-batches after a first update, and the
    estimate."""
    lrn, cfg = learner(shape, layers, precision, lora, checkpointed, rows * length, kl)
    part = samples(2 * rows, length, shape.vocab, shorter, spans)
    lrn.step(part)
    meter = measured_update(lrn, lambda: lrn.step(part))
    widest = lrn.micro_batches(part)[-1][0]
    batch = MicroBatch(rows * length, length, trained=sum(sum(s.loss_mask[1:]) for s in widest),
                       padded=bool(shorter), constrained=bool(spans))
    est = learner_memory(shape.cut(layers), cfg, batch)
    return meter.peaks, expected(est), est


CONFIGS = {
    "lora bf16 checkpointed": dict(precision="bf16", lora="attention", checkpointed=True),
    "lora bf16 padded": dict(precision="bf16", lora="attention", checkpointed=False, shorter=64),
    "lora fp32 checkpointed kl": dict(precision="fp32", lora="attention", checkpointed=True, kl=0.1),
    "full bf16 checkpointed": dict(precision="bf16", lora="off", checkpointed=True),
    "full fp32 tied": dict(precision="fp32", lora="off", checkpointed=False, tied=True),
    "lora bf16 grammar": dict(precision="bf16", lora="attention", checkpointed=True, spans=((100, 400),)),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_wide_phase_and_the_peak_match_the_measurement(name, monkeypatch):
    options = dict(CONFIGS[name])
    shape = ModelShape("tied", 2, 512, 8, 4, 1536, 4096, True) if options.pop("tied", False) else SHAPE
    monkeypatch.setattr(constraints, "compiler_for", lambda tokenizer, vocab: HalfGrammar(vocab))
    got, want, _ = update_peaks(shape, 2, **options)
    peak = max(want.values())
    for phase, bytes_ in want.items():
        if bytes_ >= 0.25 * peak:  # the phases that could be the peak; the step of a LoRA run is a few KiB
            assert BOUNDS[0] <= got[phase] / bytes_ <= BOUNDS[1], (phase, got, want)
    assert BOUNDS[0] <= max(got.values()) / peak <= BOUNDS[1] and 0.9 <= max(got.values()) / peak <= 1.1


def test_the_peak_is_the_widest_phase_not_the_sum_of_backward_and_log_probs():
    """The head's backward ends before any layer is recomputed: adding the two would overstate the peak by half."""
    got, _, est = update_peaks(SHAPE, 2, "bf16", "attention", True)
    assert got["logprobs"] > 0.5 * got["backward"] and got["backward"] > 0.3 * got["logprobs"]  # both are wide
    above_start = (est.total - est.weights - est.optimizer - est.reference - est.runtime) * (1 << 30)
    assert 0.9 <= max(got.values()) / above_start <= 1.1  # the gradients and the widest phase


def test_checkpointing_saves_what_the_estimate_says():
    plain, plain_want, _ = update_peaks(SHAPE, 2, "bf16", "attention", False)
    ckpt, ckpt_want, _ = update_peaks(SHAPE, 2, "bf16", "attention", True)
    saved, planned = max(plain.values()) - max(ckpt.values()), max(plain_want.values()) - max(ckpt_want.values())
    assert planned > 0.2 * max(plain_want.values()) and BOUNDS[0] <= saved / planned <= BOUNDS[1]


# --- the log-prob chunk --------------------------------------------------------------------------------------
@pytest.mark.parametrize("constrained", [False, True])
def test_a_log_prob_chunk_peaks_at_its_estimated_moments(constrained):
    rows, vocab, hidden = 128, 4001, 64  # a vocabulary no multiple of 32: the bitmask's last word is padding
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(vocab, hidden, generator=g) * 0.05
    states = torch.randn(rows, hidden, generator=g).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), generator=g)
    bits = torch.randint(-(1 << 31), 1 << 31, (rows, (vocab + 31) // 32), generator=g).to(torch.int32)
    grammar = GrammarRows(torch.arange(rows), bits, vocab) if constrained else None
    out, forward = measured("cpu", lambda: chunked_stats(states, weight, None, targets, 1.0, rows, grammar))
    _, backward = measured("cpu", out[:, 0].sum().backward)
    chunk = Chunk(rows, vocab, constrained)
    assert forward.peak == pytest.approx(chunk.peak("forward"), rel=0.03)
    assert backward.peak == pytest.approx(chunk.peak("backward"), rel=0.03)
    if constrained:  # the unpacking alone: the bool rows and unpack_bitmask's two int32 (rows, words, 32) temporaries
        _, unpack = measured("cpu", lambda: banned_chunk(torch.arange(rows), bits, rows, vocab))
        assert unpack.peak == pytest.approx(chunk.moments()["unpack"] - 4 * chunk.elements, rel=0.03)


# --- one estimate everywhere ---------------------------------------------------------------------------------
def test_plan_and_the_config_check_use_the_one_estimate():
    job = load_job([str(ROOT / "configs/train_builder.yaml"), str(ROOT / "configs/cluster.yaml")], []).config
    report = place_job(job, load_cluster(ROOT / "infra/ray/cluster.yaml"))
    cfg = actors(job)[3]
    est = learner_memory(KNOWN["qwen2.5-7b"], cfg, planned_batch(cfg, 8192))
    assert report.memory["learner@learner"]["total"] == pytest.approx(est.total)
    assert fit(KNOWN["qwen2.5-7b"], cfg, 8192, 45.0).learner == est  # what RLConfig.check refuses by


def test_the_estimate_imports_without_omegaconf():
    code = ("import sys; sys.modules['omegaconf'] = None\n"
            "import librarian.planning.memory_estimate, librarian.planning.memory_meter\n"
            "assert 'librarian.config' not in sys.modules, 'the config machinery came along'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
