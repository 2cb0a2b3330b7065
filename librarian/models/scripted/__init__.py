"""Scripted policies: deterministic programs that play a role (baselines, teachers, test drivers), and the `scripted`
backend that serves them.

`base` holds what every policy shares (the policy's shape, reading and
writing messages); `registry` the policies by name and `ScriptedBackend`.
The policies: `reader` (the KBGym reader and the probe reader), `reactive`
(a reader answering from what it has seen), `curator`, `builder` (the
heuristic builders, the builder's teacher), `researcher` (the JAM
researcher), `kbgym` (parsing KBGym facts and questions), and the
PhantomWiki ones: `phantom` (parsing), `phantom_reader`, `phantom_curator`.
Each is imported only when used (the registry names them as "module:attr").
"""

from __future__ import annotations

from librarian.models.scripted.base import (
    ScriptedPolicy,
    last_observation,
    observation_text,
    task_question,
    tool_call_text,
)
from librarian.models.scripted.registry import (
    SCRIPTED_POLICIES,
    ScriptedBackend,
    first_hit_reader,
    make_scripted_backend,
    scripted_policy,
)

__all__ = ["SCRIPTED_POLICIES", "ScriptedBackend", "ScriptedPolicy", "first_hit_reader", "last_observation",
           "make_scripted_backend", "observation_text", "scripted_policy", "task_question", "tool_call_text"]
