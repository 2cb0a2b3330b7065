"""`LearnerActor`: the Ray actor that owns one `librarian.learner.Learner` (engine, optimizer, checkpoints).

The base model comes from the same backend spec as the rollout workers'
(`make_backend(name, **options).model`), so a published LoRA adapter or full
state dict fits them. `publish()` puts the payload in the object store once
and returns `(version, ref)`; rollout workers fetch it by reference.

With full-weight broadcast (`weight_sync.BroadcastSync`) rank 0 hosts the
sender instead: `sync_open` makes it for the receivers' rank counts and
returns each one's join payload, `sync_connect` joins the group while they
do, and each round `sync_meta` describes the weights and `sync_send`
broadcasts them (every rank iterates them: ZeRO-3 gathers each tensor).

`learner_start.start_learner(topology, ...)` is how a run gets its learner:
this actor for `learner.workers: 1`, or a `LearnerGroup` of that many ranks
(`librarian.cluster.learner_group`), which answers the same methods.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from librarian.learner import Learner
from librarian.learner.sft import fine_tune, mean_nll
from librarian.learner.weights import WeightsPayload, device_state, full_weights, full_weights_meta
from librarian.models import make_backend
from librarian.models.weight_transfer.gloo import make_sender
from librarian.models.weight_transfer.nccl import BUFFER_BYTES, meta_of, update_info
from librarian.models.weight_transfer.payloads import cuda_ipc_handles, this_node


class LearnerActor:
    """GRPO steps, SFT, weight publishing and checkpoints, in one process."""

    def __init__(self, backend: str, options: dict, cfg: Any, torch_threads: int = 0) -> None:
        self._build(backend, options, cfg, torch_threads)

    def _build(self, backend: str, options: dict, cfg: Any, torch_threads: int) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch

        if torch_threads:
            torch.set_num_threads(torch_threads)
        policy = make_backend(backend, **dict(options))
        model = getattr(policy, "model", None)
        if model is None:
            raise ValueError(f"the learner needs a backend with a local model (hf); {backend!r} has none")
        self.learner = Learner(model.to(cfg.device), cfg, pad_id=getattr(policy, "pad_id", 0),
                               tokenizer=getattr(policy, "tokenizer", None))
        self.sender: Any = None

    def pid(self) -> int:
        return os.getpid()

    def version(self) -> int:
        return self.learner.version

    @contextmanager
    def _micro(self, n: int) -> Iterator[None]:
        """The torch engine takes at most `grad_accum` micro-batches, fewer when a batch has fewer samples
        (the loss is the same either way); DeepSpeed's accumulation count is fixed, so it is left alone."""
        cfg = self.learner.cfg
        configured = cfg.grad_accum
        if cfg.engine == "torch":
            cfg.grad_accum = max(1, min(configured, n))
        try:
            yield
        finally:
            cfg.grad_accum = configured

    def step(self, samples: Sequence[Any]) -> dict[str, float]:
        """One GRPO update; the learner's metrics."""
        with self._micro(len(samples)):
            return self.learner.step(samples)

    def sft(self, samples: Sequence[Any], epochs: int = 1, batch_size: int = 8, seed: int = 0,
            lr: float = 0.0, eps: float = 0.0) -> list[dict]:
        """Verified-trajectory SFT (`librarian.learner.sft.fine_tune`; `lr`, `eps` 0: the learner's); each step's
        metrics. At the end the fine-tuned policy becomes the KL reference (`Learner.freeze_reference`), for every
        pipeline."""
        smallest = min(len(samples), batch_size, len(samples) % batch_size or batch_size)  # the last batch
        with self._micro(max(1, smallest // self.learner.world)):  # a rank trains on its share of each batch
            return fine_tune(self.learner, samples, epochs=epochs, batch_size=batch_size, seed=seed,
                             progress=self.learner.rank == 0,
                             lr=lr or None, eps=eps or None)

    def freeze_reference(self) -> None:
        """Make the current policy the KL reference (SFT does this itself; for other warm starts)."""
        self.learner.freeze_reference()

    def mean_nll(self, samples: Sequence[Any]) -> float:
        return mean_nll(self.learner, samples)

    def publish(self, transfer: str = "") -> tuple[int, Any]:
        """(version, object ref of the `WeightsPayload`); in a group rank 0 publishes, the others (version, None)
        after joining ZeRO-3's gather. `transfer` 'ipc': full weights as CUDA IPC handles of this learner's GPU
        tensors (held until the next publish, so the engine can open them), not CPU copies."""
        import ray

        if self.learner.rank:
            if self.learner.engine.partitioned:
                self.learner.engine.trainable_state()
            return self.learner.version, None
        if transfer == "ipc":
            return self.learner.version, ray.put(self._ipc_payload())
        version, payload = self.learner.publish_weights()
        return version, ray.put(payload)

    def _ipc_payload(self) -> Any:
        if self.learner.cfg.lora.enabled:
            raise ValueError("IPC publishing sends full weights; a LoRA learner publishes its adapter (transfer '')")
        self.held = device_state(self.learner)  # the engine opens these; a copy would double the weights' memory
        return WeightsPayload(self.learner.version, "full", {}, node=this_node(), ipc=cuda_ipc_handles(self.held))

    def release_memory(self) -> None:
        """Hand the allocator's cached GPU memory back to the device, for a colocated engine waking up."""
        import torch

        if torch.cuda.is_available() and str(self.learner.cfg.device).startswith("cuda"):
            torch.cuda.empty_cache()

    def sync_open(self, sizes: list[int], transport: str, buffer_bytes: int = 0, timeout_s: float = 1800.0
                  ) -> list[dict]:
        """Rank 0: a new broadcast sender (`weight_transfer.gloo.make_sender`) for receivers of `sizes` ranks each (the
        previous one closed); each receiver's join payload. Other ranks: []."""
        import ray

        self.sync_close()
        if self.learner.rank:
            return []
        self.sender = make_sender(transport, sizes, buffer_bytes or BUFFER_BYTES, ray.util.get_node_ip_address(),
                                  timeout_s)
        return [self.sender.init_info(i) for i in range(len(sizes))]

    def sync_connect(self) -> None:
        """Rank 0 starts joining the broadcast group in a thread and returns: the receivers may first need this
        actor (a restarted worker pulls the weights through `publish` before it can join); `sync_joined` waits."""
        if self.sender is None:
            return
        errors: list[BaseException] = []
        thread = threading.Thread(target=_connect, args=(self.sender, errors), daemon=True)
        thread.start()
        self.connecting = (errors, thread)

    def sync_joined(self, timeout_s: float = 1800.0) -> None:
        """Wait until rank 0 is in the group (every receiver has joined); its error if joining failed."""
        errors, thread = getattr(self, "connecting", ([], None))
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                raise RuntimeError(f"the learner did not join the weight broadcast group within {timeout_s:.0f} s")
        self.connecting = ([], None)
        if errors:
            raise errors[0]

    def sync_meta(self, dtype: str = "") -> tuple[int, dict]:
        """(version, `update_info`) of the weights `sync_send` broadcasts next, cast to `dtype` ('' keeps theirs)."""
        return self.learner.version, update_info(full_weights_meta(self.learner, _dtype(dtype)))

    def sync_send(self, dtype: str, info: dict) -> tuple[int, int]:
        """Broadcast the full weights described by `info` (`sync_meta`); (version, bytes sent by this rank)."""
        stream = full_weights(self.learner, _dtype(dtype))
        if self.learner.rank:
            if self.learner.engine.partitioned:  # ZeRO-3: every rank takes part in each tensor's gather
                for _ in stream:
                    pass
            return self.learner.version, 0
        if self.sender is None:
            raise RuntimeError("sync_send before sync_open: the learner hosts no broadcast group")
        return self.learner.version, int(self.sender.send(stream, meta_of(info)))

    def sync_close(self) -> None:
        """Leave and drop the broadcast group (rank 0)."""
        sender, self.sender = getattr(self, "sender", None), None
        if sender is not None:
            sender.close()

    def trainable_norm(self) -> float:
        """The L2 norm of the trainable weights (tests check that they move)."""
        import torch

        state = self.learner.engine.trainable_state()
        return float(torch.sqrt(sum((t.float() ** 2).sum() for t in state.values())))

    def save(self, folder: str, extra: dict | None = None) -> str:
        return str(self.learner.save(folder, extra))

    def load(self, folder: str) -> dict:
        return self.learner.load(folder)


def _connect(sender: Any, errors: list) -> None:
    try:
        sender.connect()
    except Exception as exc:  # noqa: BLE001 - handed to sync_joined
        errors.append(exc)


def _dtype(name: str) -> Any:
    """The torch dtype named `name` ('bfloat16', 'float32'); '' and 'auto' keep the weights' own."""
    import torch

    if not name or name == "auto":
        return None
    kind = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(kind, torch.dtype):
        raise ValueError(f"weight broadcast dtype must name a torch dtype (e.g. bfloat16), got {name!r}")
    return kind
