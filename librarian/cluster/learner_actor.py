"""`LearnerActor`: the Ray actor that owns one `librarian.learner.Learner` (engine, optimizer, checkpoints).

The base model comes from the same backend spec as the rollout workers'
(`make_backend(name, **options).model`), so a published LoRA adapter or full
state dict fits them. `publish()` puts the payload in the object store once
and returns `(version, ref)`; rollout workers fetch it by reference.

`LearnerActor.start(topology, ...)` is how a pipeline gets its learner: this
actor for `learner.workers: 1`, or a `LearnerGroup` of that many ranks
(`librarian.cluster.learner_group`), which answers the same methods.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class LearnerActor:
    """GRPO steps, SFT, weight publishing and checkpoints, in one process."""

    def __init__(self, backend: str, options: dict, cfg: Any, torch_threads: int = 0) -> None:
        self._build(backend, options, cfg, torch_threads)

    @staticmethod
    def start(topology: Any, backend: str, options: dict, cfg: Any, torch_threads: int = 0) -> Any:
        """The run's learner actor in `topology`'s placement group: one `LearnerActor`, or a `LearnerGroup` of
        `cfg.workers` data-parallel ranks (the same methods)."""
        from librarian.cluster.learner_group import start_learner

        return start_learner(topology, backend, options, cfg, torch_threads)

    def _build(self, backend: str, options: dict, cfg: Any, torch_threads: int) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch

        from librarian.learner import Learner
        from librarian.models import make_backend

        if torch_threads:
            torch.set_num_threads(torch_threads)
        policy = make_backend(backend, **dict(options))
        model = getattr(policy, "model", None)
        if model is None:
            raise ValueError(f"the learner needs a backend with a local model (hf); {backend!r} has none")
        self.learner = Learner(model.to(cfg.device), cfg, pad_id=getattr(policy, "pad_id", 0),
                               tokenizer=getattr(policy, "tokenizer", None))

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
            lr: float = 0.0) -> list[dict]:
        """Verified-trajectory SFT (`librarian.learner.sft.fine_tune`); each step's metrics. At the end the
        fine-tuned policy becomes the KL reference (`Learner.freeze_reference`), for every pipeline."""
        from librarian.learner.sft import fine_tune

        smallest = min(len(samples), batch_size, len(samples) % batch_size or batch_size)  # the last batch
        with self._micro(max(1, smallest // self.learner.world)):  # a rank trains on its share of each batch
            return fine_tune(self.learner, samples, epochs=epochs, batch_size=batch_size, seed=seed, progress=False,
                             lr=lr or None)

    def freeze_reference(self) -> None:
        """Make the current policy the KL reference (SFT does this itself; for other warm starts)."""
        self.learner.freeze_reference()

    def mean_nll(self, samples: Sequence[Any]) -> float:
        from librarian.learner.sft import mean_nll

        return mean_nll(self.learner, samples)

    def publish(self) -> tuple[int, Any]:
        """(version, object ref of the `WeightsPayload`); in a group rank 0 publishes, the others (version, None)
        after joining ZeRO-3's gather."""
        import ray

        if self.learner.rank:
            if self.learner.engine.partitioned:
                self.learner.engine.trainable_state()
            return self.learner.version, None
        version, payload = self.learner.publish_weights()
        return version, ray.put(payload)

    def trainable_norm(self) -> float:
        """The L2 norm of the trainable weights (tests check that they move)."""
        import torch

        state = self.learner.engine.trainable_state()
        return float(torch.sqrt(sum((t.float() ** 2).sum() for t in state.values())))

    def save(self, folder: str, extra: dict | None = None) -> str:
        return str(self.learner.save(folder, extra))

    def load(self, folder: str) -> dict:
        return self.learner.load(folder)
