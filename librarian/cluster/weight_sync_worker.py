"""Weight sync on a rollout worker: loading a published payload, and the worker's end of a broadcast group.

`apply_weights` loads a payload into the worker's backend; `resolve` turns
a `BroadcastNote` (a round this worker missed: Ray restarted it, or the
pool replaced it) into the learner's current weights, pulled once through
the object store; `BroadcastEndpoint` joins the learner's group and
receives each round (a vLLM engine's own NCCL receiver, or a
`GlooReceiver` loading into an `hf` model). The driver side is
`weight_sync`.
"""

from __future__ import annotations

import logging
from typing import Any

from librarian.cluster.waits import wait_for
from librarian.cluster.weight_sync_config import KEY, BroadcastNote, WeightSyncError
from librarian.learner.weights import load_weights
from librarian.models.weight_transfer.gloo import GlooReceiver, check_fits, load_into
from librarian.models.weight_transfer.nccl import meta_of

log = logging.getLogger(__name__)


def apply_weights(backend: Any, payload: Any) -> int:
    """Load `payload` into a rollout backend: its own `load_weights` (vllm) or the learner's (hf)."""
    own = getattr(backend, "load_weights", None)
    if callable(own):
        return int(own(payload))

    return load_weights(backend, payload)


def resolve(payload: Any) -> Any:
    """A loadable payload: a `BroadcastNote` becomes the learner's current weights, pulled through the object store
    (a worker that missed the broadcast); anything else is returned as it is."""
    if not isinstance(payload, BroadcastNote):
        return payload

    if payload.learner is None:
        raise WeightSyncError(f"missed broadcast version {payload.version} and the note names no learner to pull from")
    log.warning("this worker missed broadcast version %d (restarted?); pulling the learner's weights once through "
                "the object store", payload.version)
    _, ref = wait_for(payload.learner.publish.remote(), payload.timeout_s, "publish() (a missed broadcast's pull)",
                      payload.learner, KEY)
    return wait_for(ref, payload.timeout_s, "fetching the learner's weights", payload.learner, KEY)


class BroadcastEndpoint:
    """A rollout worker's end of the learner's broadcast group: a vLLM engine's own NCCL receiver
    (`init_nccl`/`receive_nccl`) or a `GlooReceiver` that loads into the backend's local model (hf)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.vllm = callable(getattr(backend, "init_nccl", None))
        self.receiver: Any = None
        self.joined = False

    def ranks(self) -> int:
        """The ranks this worker adds to the group: a vLLM engine's tensor x pipeline parallel size, else 1."""
        return int(self.backend.nccl_ranks()) if self.vllm else 1

    def _model(self) -> Any:
        model = getattr(self.backend, "model", None)
        if model is None:
            raise WeightSyncError(f"rollout backend {type(self.backend).__name__} has no local model to receive "
                                  "broadcast weights into")
        return model

    def join(self, init_info: dict) -> None:
        """Join a (new) group; blocks until everyone has joined."""
        self.leave()
        if self.vllm:
            if "transport" in init_info:
                raise WeightSyncError(f"a vLLM engine receives over NCCL, not {init_info['transport']!r}")
            self.backend.init_nccl(init_info)
        else:
            import ray

            self._model()
            host = ray.util.get_node_ip_address() if ray.is_initialized() else ""
            self.receiver = GlooReceiver(init_info, host=host)
        self.joined = True

    def check(self, update_info: dict) -> bool:
        """Refuse a round whose tensor list does not fit this worker's model, before any byte is sent; whether this
        worker is in the group (False: restarted since it joined)."""
        meta = meta_of(update_info)
        if not self.vllm:
            check_fits(self._model(), meta)
        return self.joined

    def receive(self, version: int, update_info: dict) -> int:
        """Receive one round the learner broadcasts meanwhile; the version now loaded."""
        if not self.joined:
            raise WeightSyncError("receive_broadcast before join_broadcast: this worker is not in the learner's group")
        if self.vllm:
            return int(self.backend.receive_nccl(version, update_info))

        current = int(getattr(self.backend, "policy_version", -1))
        if int(version) < current:
            raise WeightSyncError(f"refusing weights version {version}: version {current} is already loaded")
        model, meta = self._model(), meta_of(update_info)
        check_fits(model, meta)
        load_into(model, self.receiver.receive(meta))
        model.eval()
        self.backend.policy_version = int(version)
        return int(version)

    def leave(self) -> None:
        """Leave the group (before joining a new one)."""
        if self.joined and self.vllm:
            try:
                self.backend.close_nccl()
            except Exception as exc:  # noqa: BLE001 - a broken old group must not stop joining the new one
                log.warning("leaving the old NCCL group failed: %s", exc)
        if self.receiver is not None:
            self.receiver.close()
        self.receiver, self.joined = None, False
