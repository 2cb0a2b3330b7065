"""The policy-backend contract: chat conversations with tool schemas in, sampled continuations out.

Every backend (`hf`, `openai`, `scripted`, later `vllm`) implements
`PolicyBackend`. Nothing here imports torch or transformers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

Message = dict[str, Any]  # {"role": "system" | "user" | "assistant" | "tool", "content": str}
ToolSchema = dict[str, Any]  # OpenAI function format: {"type": "function", "function": {...}}
FinishReason = Literal["stop", "length"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


class BackendError(RuntimeError):
    """A backend could not be built or could not generate; the message names what and where."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample. `temperature == 0` is greedy; `stop` strings end a sample (and stay in its text)."""

    n: int = 1
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    grammar: str | None = None  # an xgrammar EBNF grammar every sample must follow (`models.constrained`)
    grammars: tuple[str, ...] | None = None  # one grammar per prompt instead (prompts of different corpora decoded
    # in one batch); a backend that cannot batch them decodes each grammar's prompts together (`by_grammar`)

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be a positive integer, got {self.n!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if not isinstance(self.temperature, int | float) or not 0.0 <= float(self.temperature) <= 10.0:
            raise ValueError(f"SamplingParams.temperature must be in [0, 10], got {self.temperature!r}")
        if not isinstance(self.top_p, int | float) or not 0.0 < float(self.top_p) <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must be a tuple of non-empty strings, got {self.stop!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"SamplingParams.seed must be an integer or None, got {self.seed!r}")
        if self.grammar is not None and (not isinstance(self.grammar, str) or not self.grammar.strip()):
            raise ValueError(f"SamplingParams.grammar must be a non-empty grammar string or None, got {self.grammar!r}")
        if self.grammars is not None:
            if self.grammar is not None:
                raise ValueError("SamplingParams takes a grammar or per-prompt grammars, not both")
            if not isinstance(self.grammars, tuple) or not all(isinstance(g, str) and g.strip() for g in self.grammars):
                raise ValueError("SamplingParams.grammars must be a tuple of non-empty grammar strings")

    def for_prompts(self, count: int) -> list[str | None]:
        """The grammar of each of `count` prompts (None: unconstrained); raises ValueError when `grammars` does not
        hold one per prompt."""
        if self.grammars is None:
            return [self.grammar] * count
        if len(self.grammars) != count:
            raise ValueError(f"SamplingParams.grammars holds {len(self.grammars)} grammars for {count} prompts")
        return list(self.grammars)

    @property
    def greedy(self) -> bool:
        return float(self.temperature) == 0.0


def by_grammar(generate: Any, conversations: Sequence[Any], tools: Any, params: SamplingParams) -> list[list[Any]]:
    """`generate(conversations, tools, params)` under per-prompt grammars, for a backend that takes one grammar a
    call: the prompts of each grammar decoded together, the results in prompt order."""
    grammars = params.for_prompts(len(conversations))
    out: list[list[Any] | None] = [None] * len(conversations)
    for grammar in dict.fromkeys(grammars):
        idx = [i for i, g in enumerate(grammars) if g == grammar]
        rows = generate([conversations[i] for i in idx], tools, replace(params, grammar=grammar, grammars=None))
        for i, row in zip(idx, rows, strict=True):
            out[i] = row
    return out  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class Sample:
    """One sampled continuation.

    `token_ids` are the generated tokens (the end-of-turn token included when
    the model produced it); `logprobs[i]` is the log-probability of
    `token_ids[i]` under the distribution it was sampled from (under a
    grammar: the softmax over the tokens it allowed). Both are empty
    for backends without tokens (scripted). `text` is the decoded
    continuation without special tokens, cut right after a stop string.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_token_ids: tuple[int, ...] = ()
    finish_reason: FinishReason = "stop"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.logprobs and len(self.logprobs) != len(self.token_ids):
            raise ValueError(f"Sample has {len(self.token_ids)} tokens but {len(self.logprobs)} log-probs")


@runtime_checkable
class PolicyBackend(Protocol):
    """Generates assistant turns for a batch of conversations."""

    name: str

    def generate(self, conversations: Sequence[Sequence[Message]], tools: Sequence[ToolSchema] | None,
                 params: SamplingParams) -> list[list[Sample]]:
        """`params.n` samples for each conversation, in order: result[i][j] is sample j of conversation i."""

    def render_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        """The prompt text the model sees for `messages` (rendered with the model's chat template)."""


def check_conversations(conversations: Sequence[Sequence[Message]]) -> list[list[Message]]:
    """Validate a batch of conversations; raises `ValueError` naming the first bad message."""
    if isinstance(conversations, str | bytes) or not isinstance(conversations, Sequence):
        raise ValueError(f"conversations must be a list of message lists, got {type(conversations).__name__}")
    out: list[list[Message]] = []
    for i, conv in enumerate(conversations):
        if isinstance(conv, str | bytes | dict) or not isinstance(conv, Sequence) or not conv:
            raise ValueError(f"conversation {i} must be a non-empty list of messages")
        for j, msg in enumerate(conv):
            if not isinstance(msg, dict) or msg.get("role") not in ROLES or not isinstance(msg.get("content"), str):
                raise ValueError(
                    f"conversation {i}, message {j}: expected {{'role': one of {', '.join(ROLES)}, "
                    f"'content': str}}, got {str(msg)[:120]}"
                )
        out.append([dict(m) for m in conv])
    return out


SEED_BITS = 63


def derive_seed(seed: int, conversation: int, sample: int = 0) -> int:
    """The seed of sample `sample` of conversation `conversation` in a `generate` call seeded with `seed`.

    Engines that seed each request separately (vLLM, OpenAI-compatible servers) give identical prompts
    with one seed identical completions, so a GRPO group of identical prompts needs one seed per
    sample. A pure function of its integer arguments (blake2b, never Python's salted `hash`): the same
    call seed reproduces the same group in any process, and distinct (conversation, sample) pairs get
    distinct seeds (63-bit values; a collision is a 2**-63 event). Non-negative, below 2**63.
    """
    for name, value in (("seed", seed), ("conversation", conversation), ("sample", sample)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"derive_seed: {name} must be an integer, got {value!r}")
    if conversation < 0 or sample < 0:
        raise ValueError(f"derive_seed: conversation and sample must be >= 0, got {conversation}, {sample}")
    key = f"librarian-seed:{seed}:{conversation}:{sample}".encode("ascii")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> (64 - SEED_BITS)


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """`text` cut right after the earliest stop string it contains, and that stop (or None)."""
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop)
        if at >= 0 and (best is None or at + len(stop) < best[0] + len(best[1])):
            best = (at, stop)
    if best is None:
        return text, None
    return text[: best[0] + len(best[1])], best[1]
