"""The learner's seeded init leaves the caller's random state alone, the CUDA generators included, and cutting a
grammar-masked batch into chunks reads the row indices from their host copy (no device-to-host copy per pass).

Without a GPU, CUDA's generators are observable through torch's record of the seed `torch.manual_seed` queues for
CUDA's start (`torch.cuda._lazy_seed_tracker`): a learner that reseeded CUDA would replace it. With a GPU the
generators' states are compared; `scripts/gpu_check.py` (`rng_restored`) does the same on the GPU machine.
"""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.learner import Learner, LearnerConfig, LoraConfig
from librarian.learner.constraints import GrammarRows
from librarian.learner.rng import cuda_devices, seeded
from tests.learner.conftest import tiny_model

VOCAB = 100


def cuda_state() -> object:
    """The CUDA generators' states, or (before CUDA starts) the seed queued for its start."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return [s.clone() for s in torch.cuda.get_rng_state_all()]
    calls = torch.cuda._lazy_seed_tracker.get_calls()
    return calls[-1] if calls else None


def same(a: object, b: object) -> bool:
    if isinstance(a, list):
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    return a is b


def test_seeded_restores_the_cpu_generator_and_draws_as_manual_seed_does():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    with seeded(7):
        inside = torch.rand(5)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(7)
    assert torch.equal(inside, torch.rand(5))


def test_seeded_leaves_every_cuda_generator_it_was_not_given_alone():
    torch.manual_seed(123)
    before = cuda_state()
    with seeded(7, devices=[]):
        torch.rand(3)
    assert same(cuda_state(), before)


def test_a_learner_leaves_the_callers_cpu_and_cuda_generators_as_they_were():
    model = tiny_model()
    torch.manual_seed(123)
    cpu, cuda = torch.get_rng_state(), cuda_state()
    learner = Learner(model, LearnerConfig(seed=3, lora=LoraConfig(rank=4, alpha=8)))
    assert torch.equal(torch.get_rng_state(), cpu) and same(cuda_state(), cuda)
    again = Learner(tiny_model(), LearnerConfig(seed=3, lora=LoraConfig(rank=4, alpha=8)))
    first, second = learner.engine.trainable_state(), again.engine.trainable_state()
    assert all(torch.equal(first[k], second[k]) for k in first)  # the init is still seeded


@pytest.mark.parametrize("device, expect", [("cpu", []), ("meta", []), ("cuda:1", [1])])
def test_the_cuda_devices_of_a_learner_device(device, expect):
    assert cuda_devices(device) == expect


def test_chunk_cuts_come_from_the_host_copy_of_the_row_indices():
    """Indices and masks on a device whose data cannot be read back (meta): only the host copy can answer."""
    index = torch.tensor([1, 4, 5, 9])
    on_device = GrammarRows(index.to("meta"), torch.zeros(4, (VOCAB + 31) // 32, dtype=torch.int32, device="meta"),
                            VOCAB, index)
    assert on_device.bounds([0, 4, 8, 12]) == [0, 1, 3, 4]
    moved = GrammarRows(index, torch.zeros(4, (VOCAB + 31) // 32, dtype=torch.int32), VOCAB).to("meta")
    assert moved.device.type == "meta" and moved.bounds([5, 6]) == [2, 3]
