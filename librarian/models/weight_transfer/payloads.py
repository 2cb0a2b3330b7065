"""The trainer's side of weight sync to a vLLM engine: adapter folders, weight files, CUDA IPC.

Runs in the main environment (torch + safetensors, no vLLM). A published
policy (the learner's `WeightsPayload`: `version`, `kind` 'lora' | 'full',
`state`, `lora`, `node`) becomes:
- 'lora': a peft-format adapter folder (`adapter_config.json` +
  `adapter_model.safetensors`) that vLLM registers as a new LoRA;
- 'full': one safetensors file of HF-named tensors (any device), or CUDA IPC
  handles of the learner's GPU tensors, which only a process on the same
  node can open (`check_same_node`);
- 'full' over NCCL: `weight_transfer.nccl` (a broadcast from the learner, not a payload).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from librarian.models.base import BackendError
from librarian.models.vllm_protocol import pack

LORA_FIELDS = ("rank", "alpha", "target_modules")


def _tensors(state: Mapping[str, Any]) -> dict[str, Any]:
    """Contiguous CPU copies with no shared storage (safetensors refuses tied tensors)."""
    import torch

    out = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise BackendError(f"weights: {name!r} is a {type(value).__name__}, not a tensor")
        out[name] = value.detach().to("cpu").contiguous().clone()
    return out


def write_lora_adapter(folder: str | Path, state: Mapping[str, Any], lora: Mapping[str, Any],
                       base_model: str = "") -> Path:
    """A peft-format adapter folder from adapter weights (peft state-dict names) and the LoRA config.

    `lora` holds `rank`, `alpha`, `target_modules` (and optionally `dropout`), as in the learner's
    `LoraConfig`. Written to a temporary folder first, then renamed.
    """
    from safetensors.torch import save_file

    missing = [k for k in LORA_FIELDS if k not in lora]
    if missing:
        raise BackendError(f"LoRA payload lacks {missing}; it has {sorted(lora)}")
    if not state or not all(".lora_A." in k or ".lora_B." in k for k in state):
        bad = [k for k in state if ".lora_A." not in k and ".lora_B." not in k][:3]
        raise BackendError(f"LoRA payload must hold only lora_A / lora_B weights, found {bad or 'nothing'}")
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": int(lora["rank"]), "lora_alpha": lora["alpha"],
        "lora_dropout": float(lora.get("dropout", 0.0)), "target_modules": list(lora["target_modules"]),
        "bias": "none", "modules_to_save": None, "use_rslora": False, "use_dora": False,
        "fan_in_fan_out": False, "inference_mode": True, "base_model_name_or_path": base_model,
    }
    (tmp / "adapter_config.json").write_text(json.dumps(config, indent=1))
    save_file(_tensors(state), str(tmp / "adapter_model.safetensors"))
    if folder.exists():
        raise BackendError(f"adapter folder {folder} already exists")
    os.replace(tmp, folder)
    return folder


def write_full_weights(path: str | Path, state: Mapping[str, Any]) -> Path:
    """One safetensors file of full weights (HF parameter names), written atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(_tensors(state), str(tmp))
    os.replace(tmp, path)
    return path


def cuda_ipc_handles(state: Mapping[str, Any]) -> str:
    """CUDA IPC handles for `state`'s tensors (which must live on a GPU and stay alive until loaded)."""
    from torch.multiprocessing.reductions import reduce_tensor

    handles = {}
    for name, tensor in state.items():
        if not getattr(tensor, "is_cuda", False):
            raise BackendError(f"CUDA IPC weight sync needs GPU tensors; {name!r} is on {tensor.device}")
        handles[name] = reduce_tensor(tensor.detach().contiguous())
    return pack(handles)


def weights_meta(state: Mapping[str, Any]) -> list[list[Any]]:
    """[name, dtype, shape] rows in order (what a receiver allocates)."""
    return [[name, str(t.dtype).removeprefix("torch."), list(t.shape)] for name, t in state.items()]


def this_node() -> str:
    """Which machine this process runs on: its Ray node id inside a Ray worker, else `host:<hostname>`."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return f"ray:{ray.get_runtime_context().get_node_id()}"
    return f"host:{socket.gethostname()}"


def check_same_node(origin: str, here: str | None = None) -> None:
    """CUDA IPC handles open only on the GPU node that made them: refuse, naming both, when `origin` differs."""
    here = here or this_node()
    if not origin or origin != here:
        raise BackendError(f"weight_transfer='ipc' needs the learner and the vLLM engine on one node; the weights "
                           f"come from {origin or 'an unknown node'} and this engine runs on {here}. Use "
                           "weight_transfer='nccl' across nodes (or 'file')")
