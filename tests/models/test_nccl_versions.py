"""NCCL versions: the trainer's and an engine's NCCL builds are compared before the group opens (weight_transfer.nccl)."""

from __future__ import annotations

import pytest
import torch  # noqa: TID253

from librarian.models import vllm_engine
from librarian.models.base import BackendError
from librarian.models.vllm_engine import VLLMEngine
from librarian.models.vllm_protocol import EngineConfig
from librarian.models.weight_transfer import nccl
from librarian.models.weight_transfer.nccl import (
    TRAINER_NCCL,
    accept_init_info,
    check_nccl_versions,
    init_payload,
    nccl_version,
)


@pytest.mark.parametrize("reported, text", [((2, 29, 7), "2.29.7"), ((2, 27, 3, "a0"), "2.27.3"), (22705, "2.27.5"),
                                            (2708, "2.7.8")])
def test_torchs_nccl_version_reads_as_major_minor_patch(monkeypatch, reported, text):
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: reported)
    assert nccl_version() == text


def test_a_torch_without_nccl_has_no_version(monkeypatch):
    def missing():
        raise AttributeError("module 'torch._C' has no attribute '_nccl_version'")

    monkeypatch.setattr(torch.cuda.nccl, "version", missing)
    assert nccl_version() == ""


def test_equal_or_unknown_versions_pass():
    check_nccl_versions("2.29.7", "2.29.7")
    check_nccl_versions("", "2.30.7")
    check_nccl_versions("2.29.7", "")


@pytest.mark.parametrize("engine", ["2.30.7", "2.29.3", "3.29.7"])
def test_any_difference_is_refused_naming_both(engine):
    """NCCL's own init compares major, minor and patch: any difference fails the group."""
    with pytest.raises(BackendError) as err:
        check_nccl_versions("2.29.7", engine)
    assert "trainer loads NCCL 2.29.7" in str(err.value) and f"engine NCCL {engine}" in str(err.value)
    assert "docs/vllm.md" in str(err.value)


def test_the_trainers_version_travels_in_the_init_payload_and_is_taken_out_for_vllm():
    plain = init_payload(bytes(128), 1, 2)
    assert TRAINER_NCCL not in plain  # what vLLM's NCCLWeightTransferInitInfo parses (tests/models)
    sent = init_payload(bytes(128), 1, 2, trainer_nccl="2.29.7")
    assert sent[TRAINER_NCCL] == "2.29.7"
    assert accept_init_info(sent, "2.29.7") == plain
    assert TRAINER_NCCL in sent  # the caller's payload is not changed
    with pytest.raises(BackendError, match="2.29.7.*2.30.7"):
        accept_init_info(sent, "2.30.7")


class FakeLLM:
    def __init__(self) -> None:
        self.joined: list = []

    def init_weight_transfer_engine(self, request: dict) -> None:
        self.joined.append(request)


def _engine() -> VLLMEngine:
    engine = object.__new__(VLLMEngine)  # no vLLM here: only the join path is exercised
    engine.cfg = EngineConfig(model="m", weight_transfer="nccl")
    engine.llm = FakeLLM()
    return engine


def test_an_engine_refuses_a_trainer_with_another_nccl_before_joining(monkeypatch):
    monkeypatch.setattr(vllm_engine, "nccl_version", lambda: "2.30.7")
    engine = _engine()
    with pytest.raises(BackendError, match="trainer loads NCCL 2.29.7, this vLLM engine NCCL 2.30.7"):
        engine.init_nccl(init_payload(bytes(128), 1, 2, trainer_nccl="2.29.7"))
    assert engine.llm.joined == []  # vLLM's communicator was never opened
    engine.init_nccl(init_payload(bytes(128), 1, 2, trainer_nccl="2.30.7"))
    assert engine.llm.joined == [{"init_info": init_payload(bytes(128), 1, 2)}]


def test_the_sender_puts_its_version_into_every_payload(monkeypatch):
    sender = object.__new__(nccl.NcclWeightSender)  # no GPU here: the payload path only
    sender.unique_id, sender.offsets, sender.world_size = bytes(128), [1, 3], 4
    sender.buffer_bytes, sender.nccl = 1 << 20, "2.29.7"
    assert [sender.init_info(e)[TRAINER_NCCL] for e in range(2)] == ["2.29.7", "2.29.7"]
