"""The judge role: semantic correctness of a response against gold answers, through any policy backend.

`backend_generate(backend)` turns a `PolicyBackend` into the `(prompt) ->
text` callable that `librarian.rewards.llm_judge.LLMJudge` takes (one user turn,
greedy). `BackendJudge` grades many responses in one batched `generate`
call and parses each reply with a verdict parser; the default is the
official `correct: yes|no` parser of `datasets.scoring`, and callers in
the rewards layer pass the more lenient `rewards.llm_judge.parse_verdict`
(this layer does not import rewards). A reply with no verdict is retried
once, then counted as None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from librarian.datasets.scoring import judge_prompt, parse_judge
from librarian.models.base import PolicyBackend, SamplingParams

JUDGE_PARAMS = SamplingParams(max_new_tokens=256, temperature=0.0)


def backend_generate(backend: PolicyBackend, params: SamplingParams = JUDGE_PARAMS) -> Callable[[str], str]:
    """A `(prompt) -> reply text` callable over a backend: one user turn, no tools."""

    def generate(prompt: str) -> str:
        return backend.generate([[{"role": "user", "content": prompt}]], None, params)[0][0].text

    return generate


@dataclass(frozen=True, slots=True)
class JudgeItem:
    """One judgement: the question, its gold answers (any of them counts) and the response."""

    question: str
    golds: tuple[str, ...]
    response: str

    def __post_init__(self) -> None:
        if not self.golds:
            raise ValueError(f"judge item {self.question[:60]!r}: needs at least one gold answer")


def reference(golds: Sequence[str]) -> str:
    """One gold as itself; alternatives as 'any of: a; b' (the rewards judge's wording)."""
    return golds[0] if len(golds) == 1 else "any of: " + "; ".join(golds)


@dataclass
class BackendJudge:
    """Grades responses with a backend; `parse(reply) -> True/False/None`, `retries` for unparsed replies."""

    backend: PolicyBackend
    parse: Callable[[str], bool | None] = parse_judge
    params: SamplingParams = JUDGE_PARAMS
    retries: int = 1
    replies: list[str] = field(default_factory=list)

    def prompt(self, item: JudgeItem) -> str:
        return judge_prompt(item.question, item.response, reference(item.golds))

    def judge_many(self, items: Sequence[JudgeItem]) -> list[bool | None]:
        """One verdict per item (None: no verdict after the retries); one batched generate per attempt."""
        verdicts: list[bool | None] = [None] * len(items)
        todo = list(range(len(items)))
        for _ in range(self.retries + 1):
            if not todo:
                break
            convs = [[{"role": "user", "content": self.prompt(items[i])}] for i in todo]
            samples = self.backend.generate(convs, None, self.params)
            still = []
            for i, (sample, *_) in zip(todo, samples, strict=True):
                self.replies.append(sample.text)
                verdicts[i] = self.parse(sample.text)
                if verdicts[i] is None:
                    still.append(i)
            todo = still
        return verdicts

    def __call__(self, question: str, golds: Sequence[str], response: str) -> bool | None:
        return self.judge_many([JudgeItem(question, tuple(golds), response)])[0]
