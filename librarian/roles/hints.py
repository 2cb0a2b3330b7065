"""The hint generator for hint-guided GRPO (paper 002): a hint from the trajectory and the reference answer.

Hints exist only in training rollouts. `HintSchedule.enabled` is False by
default and only the training loop turns it on; `HintedEnv` wraps any
environment and, when enabled, appends a hint to the observation every
`every` turns (tool output: masked out of the loss). Two generators share
the call shape `hinter(HintInput) -> str | None`:

- `scripted_hint`: names the next missing key and the next gold evidence
  source the trajectory has not touched yet; it never states the answer
  (any answer string is redacted, and keys that are answers are skipped).
- `LLMHinter`: asks any `PolicyBackend`, then applies the same redaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from librarian.models.base import Message, PolicyBackend, SamplingParams, ToolSchema
from librarian.roles.environment import Environment, Reset, Step


@dataclass(frozen=True, slots=True)
class HintInput:
    """What a hint may be conditioned on: the question, the reference, and the trajectory so far."""

    question: str
    answers: tuple[str, ...]
    evidence: tuple[str, ...] = ()  # gold source ids or paths
    keys: tuple[str, ...] = ()  # e.g. "person:Alice Smith", "relation:mother"
    transcript: str = ""  # everything the policy has written and seen so far


def redact(text: str, answers: Sequence[str]) -> str:
    """The text with every answer string (case-insensitive, whole words) replaced by '...'."""
    for a in sorted((a for a in answers if a.strip()), key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(a.strip())}(?!\w)", "...", text, flags=re.I)
    return text


def _key_value(key: str) -> str:
    return key.split(":", 1)[1] if ":" in key else key


def scripted_hint(h: HintInput) -> str | None:
    """The next missing key and evidence source not yet in the transcript; None when nothing is missing."""
    seen = h.transcript.lower()
    answers = {a.strip().lower() for a in h.answers}
    keys = [k for k in h.keys if _key_value(k).strip().lower() not in answers]
    missing_keys = [k for k in keys if _key_value(k).lower() not in seen]
    missing_src = [e for e in h.evidence if e.lower() not in seen]
    parts = []
    if missing_keys:
        parts.append(f"look for {_key_value(missing_keys[0])!r} ({missing_keys[0].split(':', 1)[0]})")
    if missing_src:
        parts.append(f"the source {missing_src[0]} holds evidence you have not read")
    if not parts:
        return None
    return redact("Hint: " + "; ".join(parts) + ".", h.answers)


HINT_PROMPT = (
    "A research agent is answering a question from a memory workspace. Give it one short hint that points to "
    "what it has not found yet (a person, a source, a search to try). Never state the answer.\n\n"
    "Question: {question}\nReference answer (secret, do not reveal): {answers}\nGold sources: {evidence}\n\n"
    "What the agent did so far:\n{transcript}\n\nHint:"
)


@dataclass
class LLMHinter:
    """A hint from a backend; redacted so the answer never leaks; None when the reply is empty."""

    backend: PolicyBackend
    params: SamplingParams = SamplingParams(max_new_tokens=80, temperature=0.0)
    transcript_chars: int = 3000

    def __call__(self, h: HintInput) -> str | None:
        prompt = HINT_PROMPT.format(question=h.question, answers="; ".join(h.answers),
                                    evidence=", ".join(h.evidence) or "(unknown)",
                                    transcript=h.transcript[-self.transcript_chars:] or "(nothing yet)")
        reply = self.backend.generate([[{"role": "user", "content": prompt}]], None, self.params)[0][0].text
        text = " ".join(re.sub(r"</?tool_call>", "", reply).split())
        return redact("Hint: " + text, h.answers) if text else None


Hinter = Callable[[HintInput], "str | None"]


@dataclass(frozen=True, slots=True)
class HintSchedule:
    """When hints are given: never unless `enabled` (the training loop sets it), then every `every` turns."""

    enabled: bool = False
    every: int = 3

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"HintSchedule.every must be >= 1, got {self.every}")

    def due(self, turn: int) -> bool:
        """True after policy turn `turn` (1-based) when a hint is due."""
        return self.enabled and turn % self.every == 0


@dataclass
class HintedEnv:
    """Any environment, plus a hint appended to the observation when the schedule says so."""

    env: Environment
    hinter: Hinter
    reference: HintInput
    schedule: HintSchedule = HintSchedule()
    turns: int = 0
    hints: list[str] = field(default_factory=list)
    _log: list[str] = field(default_factory=list)

    def reset(self) -> Reset:
        self.turns, self.hints, self._log = 0, [], []
        return self.env.reset()

    def answer_tools(self) -> list[ToolSchema]:
        return self.env.answer_tools()

    def final_answer(self, text: str) -> Step:
        return self.env.final_answer(text)

    def step(self, text: str, actions_left: int) -> Step:
        step = self.env.step(text, actions_left)
        self.turns += 1
        self._log += [text, step.observation]
        if step.terminated or not self.schedule.due(self.turns):
            return step
        hint = self.hinter(replace(self.reference, transcript="\n".join(self._log)))
        if not hint:
            return step
        self.hints.append(hint)
        return replace(step, observation=f"{step.observation}\n\n{hint}", info={**step.info, "hint": hint})


def transcript_of(messages: Sequence[Message]) -> str:
    """The assistant and tool turns of a conversation as one text (what a hint may condition on)."""
    return "\n".join(m["content"] for m in messages if m["role"] in ("assistant", "tool"))
