"""Weight sync: the learner publishes (version, payload); rollout workers load it before their next batch.

The driver keeps the latest payload in Ray's object store (`WeightSync`) and
hands workers a reference wrapped in a list, so a worker fetches the payload
only when its own version is older. Every trajectory records the version that
produced it; the RL step (`librarian.rl.samples.keep_fresh`) applies the
off-policy limit to a batch.
"""

from __future__ import annotations

from typing import Any


class WeightSyncError(RuntimeError):
    """A worker could not load published weights."""


def apply_weights(backend: Any, payload: Any) -> int:
    """Load `payload` into a rollout backend: its own `load_weights` (vllm) or the learner's (hf)."""
    own = getattr(backend, "load_weights", None)
    if callable(own):
        return int(own(payload))
    from librarian.learner.weights import load_weights

    return load_weights(backend, payload)


class WeightSync:
    """The latest published weights, held in the object store for the rollout workers."""

    def __init__(self) -> None:
        self.version = -1
        self.box: list[Any] = []

    def publish(self, learner: Any) -> int:
        """Ask the learner actor for its weights; the payload stays in the object store."""
        import ray

        version, ref = ray.get(learner.publish.remote())
        self.version = int(version)
        self.box = [ref]
        return self.version
