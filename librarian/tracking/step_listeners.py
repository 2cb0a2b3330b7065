"""Listeners of a run's per-step metrics: callables that `Tracker.log_metrics` calls after each logging.

A listener receives `(metrics, step)`: the finite numeric metrics just
logged and their step. A sweep's trial (`librarian ablate`) registers one
that forwards each step to Ray Tune (`tune.report`), so a scheduler such as
ASHA can stop a poor run early. Listeners belong to the process; an
exception raised by one reaches the pipeline (that is how a Tune stop ends
the run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

Listener = Callable[[Mapping[str, float], int], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def register(listener: Listener) -> Listener:
    """Call `listener(metrics, step)` on every per-step logging in this process; returns it."""
    if not callable(listener):
        raise TypeError(f"a step listener must be callable, got {type(listener).__name__}")
    with _lock:
        _listeners.append(listener)
    return listener


def unregister(listener: Listener) -> None:
    """Stop calling `listener` (nothing happens when it is not registered)."""
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def notify(metrics: Mapping[str, float], step: int) -> None:
    """Call every registered listener, in registration order, with a copy of `metrics`."""
    with _lock:
        current = list(_listeners)
    for listener in current:
        listener(dict(metrics), int(step))


@contextmanager
def listening(listener: Listener) -> Iterator[Listener]:
    """`register` for the duration of a `with` block."""
    register(listener)
    try:
        yield listener
    finally:
        unregister(listener)
