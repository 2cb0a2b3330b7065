"""Bounded waits on the learner and the weight sync: nothing the driver asks an actor for waits forever.

`wait_for(ref, seconds, call, actor, key)` is `ray.get` with a limit: past it
the call fails with `CallTimeoutError`, which names the call (`step()`), the
actor (`LearnerActor 1a2b3c4d`, Ray's actor id), how long it waited and the
config key that raises the limit (0: no limit). `learner_timeout` is the
limit of one learner call: `learner.call_timeout_s`, per SFT step for `sft`.
A stuck NCCL collective, a rank that hangs or a worker that never answers so
fails the run with a message instead of pinning the learner forever; what
happens next is the caller's recovery (a learner group stops its ranks and
can `recover()`, a broadcast group is marked broken, a run resumes from its
last checkpoint with `resume=`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


class CallTimeoutError(TimeoutError):
    """A call on an actor did not finish within its limit; the message names the call, the actor and the key."""


def actor_label(actor: Any) -> str:
    """`LearnerActor 1a2b3c4d`: an actor handle's class and the start of its Ray actor id."""
    try:
        name = actor._ray_actor_creation_function_descriptor.class_name
        return f"{name} {actor._actor_id.hex()[:8]}"
    except AttributeError:
        return type(actor).__name__


def timeout_error(call: str, actor: str, seconds: float, key: str) -> CallTimeoutError:
    """The error of a call that ran out of time."""
    return CallTimeoutError(f"{call} on {actor} did not finish within {seconds:g} s; raise {key} if it only needs "
                            "longer (0: no limit), or look for a stuck collective (NCCL) or a hung process "
                            "(`ray list actors --detail`, the actor's log)")


def wait_for(refs: Any, seconds: float, call: str, actor: Any, key: str) -> Any:
    """`ray.get(refs)` within `seconds` (0: no limit); past it a `CallTimeoutError` naming `call`, `actor` (a
    handle or a description) and `key`."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        return ray.get(refs, timeout=seconds or None)
    except GetTimeoutError:
        who = actor if isinstance(actor, str) else actor_label(actor)
        raise timeout_error(call, who, seconds, key) from None


def sft_steps(samples: int, epochs: int, batch_size: int) -> int:
    """Optimizer steps of an SFT call: `epochs` passes over `samples` in batches of `batch_size`."""
    return max(1, int(epochs) * math.ceil(int(samples) / max(1, int(batch_size))))


def learner_timeout(cfg: Any, method: str, args: Sequence[Any] = ()) -> float:
    """Seconds one learner call may take (0: no limit): `learner.call_timeout_s`, once per SFT step for `sft`
    (its arguments: samples, epochs, batch_size, ...)."""
    limit = float(cfg.call_timeout_s)
    if method == "sft" and limit and len(args) >= 3:
        samples = args[0]
        count = len(samples) if hasattr(samples, "__len__") else 1
        return limit * sft_steps(count, args[1], args[2])
    return limit


def failure_reason(exc: BaseException) -> str:
    """A one-line cause: the actor's own exception, or how its process ended."""
    from ray.exceptions import RayActorError, RayTaskError

    if isinstance(exc, RayTaskError) and exc.cause is not None:
        return f"{type(exc.cause).__name__}: {str(exc.cause).strip().splitlines()[-1][:300]}"
    if isinstance(exc, RayActorError):
        return "its process died (killed, out of memory, or crashed)"
    return f"{type(exc).__name__}: {str(exc)[:300]}"
