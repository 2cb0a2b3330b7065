"""HF-format model folders for vLLM (which loads folders, not GGUF files or objects in memory).

`tiny_llama_folder` saves the `hf` backend's tiny random Llama (SmolLM2's
tokenizer and chat template, head_dim >= 32 as vLLM's CPU attention needs);
`smollm2_hf_folder` saves SmolLM2-135M-Instruct de-quantized from the
bundled GGUF, in float32. Both are cached under `model_cache_root()` and
written atomically, so the `hf` and `vllm` backends load the same weights.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from librarian.models.base import BackendError
from librarian.models.hf import load_smollm2, tiny_llama

log = logging.getLogger(__name__)
MARKER = "librarian-model.json"


def model_cache_root() -> Path:
    """`$LIBRARIAN_MODEL_CACHE`, else `build/models` under the current folder."""
    return Path(os.environ.get("LIBRARIAN_MODEL_CACHE") or Path.cwd() / "build" / "models")


def export_model(model: Any, tokenizer: Any, folder: str | Path, meta: dict[str, Any] | None = None) -> Path:
    """Save `model` (float32 safetensors) and `tokenizer` into `folder` atomically; returns the folder."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / MARKER).write_text(json.dumps(meta or {}, indent=1, sort_keys=True))
    if (folder / MARKER).is_file():  # another process finished first
        _remove(tmp)
        return folder
    if folder.exists():
        _remove(folder)
    os.replace(tmp, folder)
    return folder


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def is_exported(folder: str | Path) -> bool:
    return (Path(folder) / MARKER).is_file()


def tiny_llama_folder(seed: int = 0, root: str | Path | None = None, layers: int = 2, hidden: int = 64,
                      heads: int = 2, kv_heads: int = 1, intermediate: int = 128) -> Path:
    """The tiny random Llama of `hf.tiny_llama` with these arguments, as an HF folder (built once)."""
    if hidden // heads < 32:
        raise BackendError(f"vLLM on CPU needs head_dim >= 32; hidden {hidden} / heads {heads} = {hidden // heads}")
    name = f"tiny-llama-l{layers}-h{hidden}-a{heads}-kv{kv_heads}-i{intermediate}-seed{seed}"
    folder = Path(root or model_cache_root()) / name
    if is_exported(folder):
        return folder

    log.info("exporting the tiny random Llama to %s", folder)
    backend = tiny_llama(seed=seed, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                         intermediate=intermediate)
    return export_model(backend.model, backend.tokenizer, folder, {"model": "tiny-llama", "seed": seed})


def smollm2_hf_folder(root: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct (float32, de-quantized from the bundled GGUF) as an HF folder (built once, ~30 s)."""
    folder = Path(root or model_cache_root()) / "smollm2-135m-instruct-f32"
    if is_exported(folder):
        return folder

    log.info("exporting SmolLM2-135M-Instruct (float32) to %s", folder)
    backend = load_smollm2(dtype="float32")
    return export_model(backend.model, backend.tokenizer, folder, {"model": "smollm2-135m-instruct"})


def resolve_model_folder(model: str | Path, root: str | Path | None = None, seed: int = 0) -> Path:
    """'tiny' | 'smollm2' | an HF folder -> an HF folder."""
    if str(model) == "tiny":
        return tiny_llama_folder(seed=seed, root=root)
    if str(model) == "smollm2":
        return smollm2_hf_folder(root=root)
    folder = Path(model)
    if not (folder / "config.json").is_file():
        raise BackendError(f"vllm backend: model must be 'tiny', 'smollm2' or a folder with config.json, got {model!r}")
    return folder
