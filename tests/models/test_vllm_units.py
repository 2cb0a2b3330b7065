"""The `vllm` backend's parts that need no engine: wire protocol, adapter / weight files, lazy imports, errors."""

from __future__ import annotations

import inspect
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: TID253
from omegaconf import OmegaConf
from safetensors.torch import load_file  # noqa: TID253

from librarian.learner import LearnerConfig
from librarian.models import BACKENDS, BackendError
from librarian.models.vllm_backend import VLLMBackend
from librarian.models.vllm_client import EngineProcess
from librarian.models.vllm_models import tiny_llama_folder
from librarian.models.vllm_protocol import (
    EngineConfig,
    ProtocolError,
    pack,
    parse_line,
    request,
    unpack,
    write_line,
)
from librarian.models.weight_transfer.payloads import weights_meta, write_full_weights, write_lora_adapter

LORA = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


def lora_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    prefix = "base_model.model.model.layers.0.self_attn"
    return {f"{prefix}.q_proj.lora_A.weight": torch.randn(4, 64, generator=g),
            f"{prefix}.q_proj.lora_B.weight": torch.randn(64, 4, generator=g)}


def test_importing_the_backend_modules_never_imports_vllm_or_torch():
    code = ("import sys, librarian.models, librarian.models.vllm_backend, librarian.models.vllm_client, "
            "librarian.models.weight_transfer.payloads, librarian.models.vllm_models, librarian.models.vllm_worker; "
            "print('vllm' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
    assert BACKENDS["vllm"] == "librarian.models.vllm_backend:make_vllm_backend"


def test_engine_config_round_trips_and_names_bad_fields():
    cfg = EngineConfig(model="/m", enable_lora=True, max_lora_rank=8, engine_kwargs={"tensor_parallel_size": 2},
                       env={"A": "1"})
    assert EngineConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    with pytest.raises(ValueError, match="unknown field"):
        EngineConfig.from_json({"model": "/m", "gpu": True})
    with pytest.raises(ValueError, match="weight_transfer"):
        EngineConfig(model="/m", weight_transfer="rdma")
    with pytest.raises(ValueError, match="model folder"):
        EngineConfig(model="")


def test_protocol_lines_round_trip_and_bad_lines_are_named():
    stream = io.StringIO()
    write_line(stream, request(3, "generate", prompts=[[1, 2]], params={"n": 2}))
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1
    assert parse_line(stream.getvalue(), "x") == {"id": 3, "op": "generate", "args": {"prompts": [[1, 2]], "params": {"n": 2}}}
    with pytest.raises(ProtocolError, match="engine answer: not a JSON line"):
        parse_line("vLLM says hello", "engine answer")
    with pytest.raises(ProtocolError, match="expected a JSON object"):
        parse_line("[1]", "engine answer")
    with pytest.raises(ProtocolError, match="unknown engine op 'train'"):
        request(1, "train")
    blob = {"w": (print, (1, "a"))}
    assert unpack(pack(blob)) == blob
    # log-probs survive JSON exactly (floats are written with repr)
    lps = [-1.0000001192092896, -10.880748748779297]
    assert json.loads(json.dumps(lps)) == lps


def test_a_lora_adapter_folder_is_what_peft_and_vllm_read(tmp_path):
    state = lora_state()
    folder = write_lora_adapter(tmp_path / "v1", state, LORA, base_model="/base")
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8)
    assert config["target_modules"] == ["q_proj", "v_proj"] and config["base_model_name_or_path"] == "/base"
    loaded = load_file(str(folder / "adapter_model.safetensors"))
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]  # no temporary folder left behind
    with pytest.raises(BackendError, match="already exists"):
        write_lora_adapter(tmp_path / "v1", state, LORA)
    with pytest.raises(BackendError, match=r"lacks \['rank'\]"):
        write_lora_adapter(tmp_path / "v2", state, {"alpha": 8, "target_modules": ["q_proj"]})
    with pytest.raises(BackendError, match="only lora_A / lora_B"):
        write_lora_adapter(tmp_path / "v3", {"model.embed_tokens.weight": torch.zeros(2)}, LORA)


def test_full_weights_with_tied_tensors_are_written_and_described(tmp_path):
    embed = torch.randn(10, 4)
    state = {"model.embed_tokens.weight": embed, "lm_head.weight": embed, "model.norm.weight": torch.ones(4)}
    path = write_full_weights(tmp_path / "full" / "model.safetensors", state)
    loaded = load_file(str(path))
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert weights_meta(state)[0] == ["model.embed_tokens.weight", "float32", [10, 4]]
    with pytest.raises(BackendError, match="'x' is a list"):
        write_full_weights(tmp_path / "bad.safetensors", {"x": [1.0]})


def test_missing_vllm_environment_and_bad_models_are_named(tmp_path):
    with pytest.raises(BackendError, match="make vllm-env"):
        EngineProcess(EngineConfig(model=str(tmp_path)), tmp_path / "no-python")
    with pytest.raises(BackendError, match="head_dim >= 32"):
        tiny_llama_folder(hidden=64, heads=4, root=tmp_path)
    with pytest.raises(BackendError, match="mode must be"):
        VLLMBackend("tiny", mode="remote")


def test_the_cluster_preset_names_only_real_backend_and_learner_options():
    cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "cluster.yaml")
    accepted = set(inspect.signature(VLLMBackend.__init__).parameters) - {"self"}
    for section in ("rollout", "probe"):
        assert cfg[section].backend == "vllm"
        assert set(cfg[section].options) <= accepted, set(cfg[section].options) - accepted
    assert cfg.rollout.options.mode in ("subprocess", "inprocess")
    learner = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LearnerConfig), cfg.learner))
    assert learner.engine == "deepspeed" and learner.lora.enabled and learner.lora.rank <= cfg.rollout.options.max_lora_rank
