"""The hint generator for hint-guided GRPO (paper 002): a hint from the trajectory and the reference answer.

Hints exist only in training rollouts. `HintSchedule.enabled` is False by
default and only the training loop turns it on; `HintedEnv` wraps any
environment and, when enabled, appends a hint to the observation every
`every` turns (tool output: masked out of the loss). Two generators share
the call shape `hinter(HintInput) -> str | None`:

- `scripted_hint`: a nudge about what is still missing: the entity or time
  the question turns on that the trajectory has not found yet (keys that are
  not answers), else that part of the evidence is still unread (a relation
  to resolve, every mention to collect, a fact that changed over time).
- `LLMHinter`: asks any `PolicyBackend` with the question, the reference
  answer (secret) and the trajectory, never the gold sources.

Paper 002: a hint gives high-level guidance about missing information; it
does not reveal the final answer or prescribe a search path. Both generators
therefore pass their text through `redact` with every answer string and every
gold source (path and id), so neither can appear in a hint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

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
    """The text with every answer string (or any secret: a source path or id; case-insensitive, whole words)
    replaced by '...'."""
    for a in sorted((a for a in answers if a.strip()), key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(a.strip())}(?!\w)", "...", text, flags=re.I)
    return text


def _key_value(key: str) -> str:
    return key.split(":", 1)[1].strip() if ":" in key else key.strip()


def _key_kind(key: str) -> str:
    return key.split(":", 1)[0].strip().lower() if ":" in key else ""


def secrets(h: HintInput) -> list[str]:
    """What a hint must never contain: the answer strings and every gold source, as a path and as an id."""
    out = list(h.answers)
    for e in h.evidence:
        out += [e, e.rsplit("/", 1)[-1]]
    return [s for s in dict.fromkeys(out) if s.strip()]


def _mentions(text: str, s: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(s.strip())}(?!\w)", text, flags=re.I) is not None


def scripted_hint(h: HintInput) -> str | None:
    """A nudge towards what the trajectory has not found yet; None when every key and source is in the transcript.

    First the entity or date the question turns on that the transcript never
    mentions (keys that are answers, or that contain a secret, are skipped);
    then, while gold evidence is still unread, what kind of evidence is
    missing (a relation to resolve, a fact that changed over time, every
    mention to collect). It never names a source and never states the answer.
    """
    seen = h.transcript.lower()
    hidden = secrets(h)
    keys = [k for k in h.keys if _key_value(k) and not any(_mentions(_key_value(k), s) for s in hidden)]
    entities = [k for k in keys if _key_kind(k) != "relation"]
    relations = [_key_value(k) for k in keys if _key_kind(k) == "relation"]
    missing = [k for k in entities if _key_value(k).lower() not in seen]
    unread = [e for e in h.evidence if e.lower() not in seen and e.rsplit("/", 1)[-1].lower() not in seen]
    q = h.question.lower()
    if missing:
        kind, value = _key_kind(missing[0]), _key_value(missing[0])
        if kind == "date":
            text = (f"the question turns on a point in time ({value}); nothing you found so far is tied to it. "
                    "Look for what was said around that date.")
        elif kind == "person":
            text = f"the question turns on {value}; nothing you found so far mentions them. Search for them first."
        else:
            text = (f"the question turns on {value} ({kind or 'a key'}); nothing you found so far mentions it. "
                    "Search for it.")
    elif unread:
        who = next((_key_value(k) for k in entities if _key_kind(k) == "person"), "")
        if relations:
            about = f"{who}'s {relations[0]}" if who else f"the {relations[0]}"
            text = (f"part of the evidence is still missing: the question goes through {about}; who that is and "
                    "what is said about them may come from different conversations.")
        elif any(k.startswith("date:") for k in h.keys) or re.search(r"\b(before|after|since|until|when)\b", q):
            text = ("part of the evidence is still missing: facts change over time, so check which mention holds "
                    "at the time the question asks about.")
        elif len(h.evidence) > 1 or re.search(r"\bhow many\b", q):
            text = ("the answer collects several mentions and you have not seen all of them yet: other "
                    f"conversations{' about ' + who if who else ''} add to it.")
        else:
            text = "part of the evidence is still missing: try other wording or another search."
    else:
        return None
    return redact("Hint: " + text, hidden)


HINT_PROMPT = (
    "A research agent is answering a question from a memory workspace. Give it one short hint about what it has "
    "not found yet (missing information, a search direction, a useful tool). Never state the answer, never name "
    "a specific session, file or document id, and do not spell out a complete search path.\n\n"
    "Question: {question}\nReference answer (secret, do not reveal): {answers}\n\n"
    "What the agent did so far:\n{transcript}\n\nHint:"
)


@dataclass
class LLMHinter:
    """A hint from a backend, which never sees the gold sources; its reply is redacted so neither an answer nor
    a gold source (path or id) can leak; None when the reply is empty."""

    backend: PolicyBackend
    params: SamplingParams = SamplingParams(max_new_tokens=80, temperature=0.0)
    transcript_chars: int = 3000

    def __call__(self, h: HintInput) -> str | None:
        prompt = HINT_PROMPT.format(question=h.question, answers="; ".join(h.answers),
                                    transcript=h.transcript[-self.transcript_chars:] or "(nothing yet)")
        reply = self.backend.generate([[{"role": "user", "content": prompt}]], None, self.params)[0][0].text
        text = " ".join(re.sub(r"</?tool_call>", "", reply).split())
        return redact("Hint: " + text, secrets(h)) if text else None


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

    def outcome(self) -> Any:
        return self.env.outcome()

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
