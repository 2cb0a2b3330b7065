"""What an episode records: per-turn actions and costs, and for LLM policies tokens, log-probs and loss masks.

Loss-mask convention: a turn's sequence is its prompt tokens followed by the
tokens the policy generated; the mask is 0 on the prompt (system prompt,
task, earlier turns, tool output) and 1 on generated tokens. `segments()`
packs consecutive turns into one sequence whenever a turn's prompt extends
the previous turn's sequence token for token; the tokens in between (the tool
output and the template's glue) are masked 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

EndReason = Literal["answer", "done", "budget", "forced_answer", "max_turns"]


@dataclass
class TurnRecord:
    """One policy turn: what it wrote, what ran, what it cost."""

    index: int
    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"} of calls that ran
    errors: list[dict[str, str]] = field(default_factory=list)  # {"kind", "message"} of calls that did not
    observation: str = ""
    actions: int = 0
    failed_calls: int = 0  # calls that parsed and ran but failed in the tool (ok=False: a merge of a missing file)
    chars_read: int = 0
    est_tokens_read: int = 0
    nodes_touched: tuple[str, ...] = ()
    raw_touched: int = 0
    synthetic_touched: int = 0
    workspace_changed: bool = False
    wall_s: float = 0.0
    generate_s: float = 0.0
    forced: bool = False
    prompt_ids: tuple[int, ...] = ()
    response_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    finish_reason: str = "stop"
    grammar: str = ""  # the grammar the response was sampled under ("" : unconstrained)

    @property
    def token_ids(self) -> tuple[int, ...]:
        return self.prompt_ids + self.response_ids

    @property
    def loss_mask(self) -> tuple[int, ...]:
        return (0,) * len(self.prompt_ids) + (1,) * len(self.response_ids)

    @property
    def has_tokens(self) -> bool:
        return bool(self.response_ids)


TUPLE_FIELDS = ("nodes_touched", "prompt_ids", "response_ids", "logprobs")  # TurnRecord fields JSON writes as lists


@dataclass(frozen=True, slots=True)
class Segment:
    """One packed token sequence: ids, loss mask (1 = generated), and log-probs (0.0 where masked)."""

    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    turns: tuple[int, ...]
    constraints: tuple[tuple[int, int, str], ...] = ()  # (start, end, grammar): tokens sampled under a grammar


@dataclass
class Trajectory:
    """An episode: the transcript, the turns, the answer, and the totals."""

    role: str
    task: str
    budget: int
    turns: list[TurnRecord] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)  # full transcript (no memory window)
    answer: str | None = None
    end: EndReason = "budget"
    wall_s: float = 0.0
    compactions: int = 0

    @property
    def actions(self) -> int:
        return sum(t.actions for t in self.turns)

    @property
    def budget_exhausted(self) -> bool:
        return self.actions >= self.budget and self.end in ("budget", "forced_answer")

    @property
    def chars_read(self) -> int:
        return sum(t.chars_read for t in self.turns)

    @property
    def est_tokens_read(self) -> int:
        return sum(t.est_tokens_read for t in self.turns)

    @property
    def nodes_touched(self) -> tuple[str, ...]:
        """Every node whose text the agent saw, first-seen order."""
        return tuple(dict.fromkeys(i for t in self.turns for i in t.nodes_touched))

    @property
    def errors(self) -> int:
        return sum(len(t.errors) for t in self.turns)

    @property
    def failed_calls(self) -> int:
        """Calls that did not execute: malformed or disallowed ones, and ones whose tool failed."""
        return sum(len(t.errors) + t.failed_calls for t in self.turns)

    def segments(self) -> list[Segment]:
        """The token sequences to train on (see the module docstring); empty without tokens."""
        out: list[Segment] = []
        ids: list[int] = []
        mask: list[int] = []
        lps: list[float] = []
        turns: list[int] = []
        spans: list[tuple[int, int, str]] = []
        for turn in self.turns:
            if not turn.has_tokens:
                continue
            prompt = list(turn.prompt_ids)
            if ids and prompt[: len(ids)] == ids:
                glue = prompt[len(ids):]
            else:
                if ids:
                    out.append(Segment(tuple(ids), tuple(mask), tuple(lps), tuple(turns), tuple(spans)))
                ids, mask, lps, turns, spans, glue = [], [], [], [], [], prompt
            if turn.grammar:
                start = len(ids) + len(glue)
                spans.append((start, start + len(turn.response_ids), turn.grammar))
            ids += glue + list(turn.response_ids)
            mask += [0] * len(glue) + [1] * len(turn.response_ids)
            lps += [0.0] * len(glue) + list(turn.logprobs or (0.0,) * len(turn.response_ids))
            turns.append(turn.index)
        if ids:
            out.append(Segment(tuple(ids), tuple(mask), tuple(lps), tuple(turns), tuple(spans)))
        return out

    def summary(self) -> dict[str, Any]:
        """The figures a results table wants."""
        return {"role": self.role, "end": self.end, "answer": self.answer, "actions": self.actions,
                "budget": self.budget, "budget_exhausted": self.budget_exhausted, "turns": len(self.turns),
                "errors": self.errors, "chars_read": self.chars_read, "est_tokens_read": self.est_tokens_read,
                "raw_touched": sum(t.raw_touched for t in self.turns),
                "synthetic_touched": sum(t.synthetic_touched for t in self.turns),
                "wall_s": self.wall_s, "compactions": self.compactions}

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-able (token fields as lists)."""
        data = asdict(self)
        data["summary"] = self.summary()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """The trajectory `to_dict` wrote (its summary is recomputed, not read)."""
        fields = {k: v for k, v in data.items() if k not in ("summary", "turns")}
        turns = [TurnRecord(**{k: tuple(v) if k in TUPLE_FIELDS else v for k, v in t.items()})
                 for t in data.get("turns", [])]
        return cls(**fields, turns=turns)
