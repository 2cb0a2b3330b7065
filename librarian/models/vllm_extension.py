"""Methods added to every vLLM worker (`worker_extension_cls`): full-weight loading from a file or CUDA IPC.

vLLM mixes this class into its worker class, so `self` is the worker
(`self.model_runner`, `self.device`); `VLLMEngine` reaches these methods with
`LLM.collective_rpc(name, args)`. Two transports, one result (the model's
in-place `reload_weights` with HF parameter names, which re-runs the weight
processing the kernels need and shards for tensor parallelism): a safetensors
file (any device, the CPU path) and CUDA IPC handles (a trainer on the same
node). The NCCL broadcast is vLLM's own weight-transfer engine
(`vllm_engine.VLLMEngine.init_nccl`), not an extension.
"""

from __future__ import annotations

from typing import Any

from librarian.models.vllm_protocol import unpack


class WeightSyncExtension:
    """Weight-sync entry points; names carry a `librarian_` prefix so they never shadow vLLM's own."""

    model_runner: Any
    device: Any

    def _librarian_load(self, weights: list[tuple[str, Any]]) -> int:
        reload = getattr(self, "reload_weights", None)
        if callable(reload):  # vLLM's in-place reload: re-runs the kernel-format processing (CPU weight packing)
            reload(weights_iterator=iter(weights), is_checkpoint_format=True)
        else:
            self.model_runner.get_model().load_weights(weights=iter(weights))
        return len(weights)

    def librarian_load_file(self, path: str) -> int:
        from safetensors.torch import load_file

        state = load_file(path, device=str(self.device))
        return self._librarian_load(list(state.items()))

    def librarian_load_ipc(self, packed: str) -> int:
        import torch

        handles: dict[str, tuple[Any, tuple[Any, ...]]] = unpack(packed)
        weights = []
        for name, (rebuild, args) in handles.items():
            args = list(args)
            args[6] = self.device.index  # the storage's device: this worker's GPU (torch's CUDA rebuild layout)
            weights.append((name, rebuild(*args)))
        count = self._librarian_load(weights)
        torch.cuda.synchronize(self.device)
        return count
