"""The exploration judge of verified-trajectory SFT (paper 002): filter unsupported or shortcut research.

A teacher trajectory is kept for SFT only when its answer is right (the gold
answer is in the finalized context: `answer_in_context`) and its exploration
is sound (`judge_exploration`, a pure function of the tool calls made before
`finalize` and the finalized result):

- it explored: at least one `search` or `open` happened;
- it is supported: every cited source was inspected (opened or browsed)
  before finalize, so nothing is cited on a search snippet or a guess;
- it says something: the context is non-empty.

`LLMExplorationJudge` asks any `(prompt) -> text` model the same question
through `librarian.rewards.llm_judge.LLMJudge` (its verdict parsing and cache).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from librarian.rewards.llm_judge import LLMJudge

EXPLORE = ("search", "open")
INSPECT = ("open", "browse")
FINALIZE = "finalize"


@dataclass(frozen=True, slots=True)
class ExplorationVerdict:
    """Whether a trajectory's exploration supports its context, and why not."""

    accepted: bool
    reasons: tuple[str, ...] = ()
    uninspected: tuple[str, ...] = ()


def _norm(ref: str) -> str:
    return ref.strip().strip("/")


def calls_before_finalize(calls: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The calls up to (not including) the first `finalize`."""
    out: list[Mapping[str, Any]] = []
    for c in calls:
        if c.get("name") == FINALIZE:
            break
        out.append(c)
    return out


def inspected(calls: Sequence[Mapping[str, Any]], canonical: Callable[[str], str] | None = None) -> set[str]:
    """The paths or ids opened or browsed before finalize (normalised; `canonical` maps paths to one id form)."""
    canon = canonical or _norm
    out: set[str] = set()
    for c in calls_before_finalize(calls):
        if c.get("name") in INSPECT:
            path = (c.get("arguments") or {}).get("path", "")
            if isinstance(path, str):
                out.add(canon(path))
    return out


def judge_exploration(calls: Sequence[Mapping[str, Any]], context: str, cited: Sequence[str],
                      canonical: Callable[[str], str] | None = None) -> ExplorationVerdict:
    """Accept when the research searched or opened, inspected every cited source before finalize, and said something.

    `calls` are the trajectory's calls in order (`{"name", "arguments"}`);
    `cited` are the refs given to finalize (`Finalized.cited`); `canonical`
    maps a ref to a canonical form (default: trimmed, no leading or trailing
    '/'), so a path and its id can be equated by the caller.
    """
    canon = canonical or _norm
    before = calls_before_finalize(calls)
    reasons: list[str] = []
    if not any(c.get("name") in EXPLORE for c in before):
        reasons.append("no search or open before finalize (a shortcut)")
    seen = inspected(calls, canon)
    missing = tuple(dict.fromkeys(r for r in cited if canon(r) not in seen))
    if missing:
        reasons.append(f"cited without inspecting: {', '.join(missing)}")
    if not context.strip():
        reasons.append("empty context")
    return ExplorationVerdict(not reasons, tuple(reasons), missing)


_SPACE = re.compile(r"\s+")


def answer_in_context(context: str, answers: Sequence[str]) -> bool:
    """Every gold answer occurs in the context (case- and whitespace-insensitive, whole words); False for none."""
    text = _SPACE.sub(" ", context.lower())
    golds = [_SPACE.sub(" ", a.strip().lower()) for a in answers if a.strip()]
    return bool(golds) and all(re.search(rf"(?<!\w){re.escape(g)}(?!\w)", text) for g in golds)


def trajectory_calls(trajectory: Any) -> list[dict[str, Any]]:
    """A trajectory's calls that ran, in order (`TurnRecord.calls`)."""
    return [c for t in trajectory.turns for c in t.calls]


EXPLORATION_TEMPLATE = (
    "You review how a research agent explored a memory workspace before handing a context to another agent.\n\n"
    "Request: {question}\n\n"
    "Exploration (tool calls in order, then the final context and cited sources):\n{response}\n\n"
    "Sources that hold the evidence: {reference}\n\n"
    "Good exploration searches or opens folders, reads (opens or browses) every source it cites, and does not "
    "cite anything it only saw as a search snippet. Explain briefly, then end with exactly one line:\n"
    "correct: yes\nor\ncorrect: no"
)


def render_exploration(calls: Sequence[Mapping[str, Any]], context: str, cited: Sequence[str],
                       max_chars: int = 4000) -> str:
    """The exploration as the judge sees it: one line per call, the context and the cited sources."""
    lines = [f"{i}. {c.get('name')}({json.dumps(c.get('arguments') or {}, ensure_ascii=False)})"
             for i, c in enumerate(calls_before_finalize(calls), start=1)]
    text = "\n".join(lines) + f"\n\nContext:\n{context.strip() or '(empty)'}\n\nCited: {', '.join(cited) or 'none'}"
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


class LLMExplorationJudge:
    """The exploration judged by a model (`generate(prompt) -> text`), gated by the rule-based judge.

    The rules run first (a rejected trajectory costs no model call); the
    model's verdict decides the rest, None (no verdict) counting as reject.
    """

    def __init__(self, generate: Callable[[str], str], retries: int = 1) -> None:
        self.judge = LLMJudge(generate, EXPLORATION_TEMPLATE, retries=retries)

    def __call__(self, request: str, calls: Sequence[Mapping[str, Any]], context: str, cited: Sequence[str],
                 gold_sources: Sequence[str]) -> ExplorationVerdict:
        rules = judge_exploration(calls, context, cited)
        if not rules.accepted:
            return rules
        verdict = self.judge(request, list(gold_sources) or ["(unknown)"], render_exploration(calls, context, cited))
        return rules if verdict else ExplorationVerdict(False, ("the model judge rejected the exploration",))
