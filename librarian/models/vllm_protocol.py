"""The wire between a `vllm` backend and its engine process: one JSON object per line, both ways.

The backend (main environment) writes requests `{"id", "op", "args"}`; the
engine process (`.venv-vllm`, see `vllm_worker`) answers `{"id", "ok": true,
"result"}` or `{"id", "ok": false, "error", "type"}`. The first line the
engine writes is `{"ready": true, "info": {...}}` (or an error). Binary
values (CUDA IPC handles) travel as base64 text. A `generate` request's
`params` hold `n`, `max_new_tokens`, `temperature`, `top_p`, `seed`, `stop`,
`stop_token_ids`, and optionally `seeds` (one per sample, `derive_seed`),
`grammar` (xgrammar EBNF) and `grammar_stop_ids` (see `vllm_engine`). Standard library only: both
environments import this module.
"""

from __future__ import annotations

import base64
import json
import pickle
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

OPS = ("generate", "load_lora", "load_full_file", "load_full_ipc", "init_nccl", "load_full_nccl", "close_nccl",
       "sleep", "wake_up", "info", "shutdown")


class ProtocolError(RuntimeError):
    """A malformed line or an answer that does not belong to the request."""


@dataclass
class EngineConfig:
    """How to build the vLLM engine: the model folder and the `vllm.LLM` options that matter here.

    `engine_kwargs` pass through to `vllm.LLM` unchanged (e.g. `tensor_parallel_size`,
    `gpu_memory_utilization` on GPUs); `env` is set in the engine process before vLLM is imported.
    """

    model: str
    dtype: str = "float32"
    seed: int = 0
    max_model_len: int = 2048
    enable_lora: bool = False
    max_lora_rank: int = 16
    enforce_eager: bool = True
    weight_transfer: str = "file"  # full-weight sync: 'file' (any device), 'ipc' or 'nccl' (CUDA)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"EngineConfig.model must be a model folder, got {self.model!r}")
        if self.weight_transfer not in ("file", "ipc", "nccl"):
            raise ValueError(f"EngineConfig.weight_transfer must be 'file', 'ipc' or 'nccl', got {self.weight_transfer!r}")
        if self.max_lora_rank < 1 or self.max_model_len < 16:
            raise ValueError(f"EngineConfig needs max_lora_rank >= 1 and max_model_len >= 16, got "
                             f"{self.max_lora_rank}, {self.max_model_len}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineConfig:
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"EngineConfig: unknown field(s) {unknown}")
        return cls(**data)


def write_line(stream: TextIO, obj: dict[str, Any]) -> None:
    """Write `obj` as one JSON line and flush."""
    stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
    stream.flush()


def parse_line(line: str, where: str) -> dict[str, Any]:
    """One JSON object from `line`; `ProtocolError` names `where` the bad line came from."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"{where}: not a JSON line ({exc}): {line[:200]!r}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where}: expected a JSON object, got {line[:200]!r}")
    return obj


def request(rid: int, op: str, **args: Any) -> dict[str, Any]:
    if op not in OPS:
        raise ProtocolError(f"unknown engine op {op!r}; ops are {', '.join(OPS)}")
    return {"id": rid, "op": op, "args": args}


def ok(rid: Any, result: Any) -> dict[str, Any]:
    return {"id": rid, "ok": True, "result": result}


def failed(rid: Any, exc: BaseException) -> dict[str, Any]:
    return {"id": rid, "ok": False, "type": type(exc).__name__, "error": str(exc)}


def pack(obj: Any) -> str:
    """A picklable object as base64 text (for CUDA IPC handles; both ends are this project's code)."""
    return base64.b64encode(pickle.dumps(obj)).decode("ascii")


def unpack(text: str) -> Any:
    return pickle.loads(base64.b64decode(text.encode("ascii")))
