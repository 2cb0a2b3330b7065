"""The reactive retrieve-and-read reader: search the question, answer from the retrieved text alone.

The baseline reader of the KBGym and Librarian papers' search arms: no
navigation and no planning. It searches the question text itself for the
first `pages` result pages (five hits each), never reads a document or
follows a link, then answers with what the snippets state. The answer comes
from the scripted KBGym reader's extraction (`scripted.reader.answer_for`
over a `KBGymKnowledge` of the transcript marked final, so every unsettled need
counts as exhausted): the same parser, fed only the retrieved text.

Which retriever it uses (BM25, dense, hybrid) is the exam's search mode
(`ReaderSpec.search_mode`), not the policy's choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted.base import task_question, tool_call_text
from librarian.models.scripted.kbgym import budget_from_prompt, transcript
from librarian.models.scripted.phantom import event_texts, is_phantom_question, reads_as_phantom
from librarian.models.scripted.phantom_reader import reactive_answer as phantom_answer
from librarian.models.scripted.reader import UNKNOWN, KBGymKnowledge, KBGymPending, answer_for


def reactive_answer(question: str, messages: Sequence[Message]) -> str:
    """The answer the retrieved snippets in `messages` support (`unknown` when they support none)."""
    events = transcript(messages)
    if is_phantom_question(question) and reads_as_phantom(question, event_texts(events)):  # PhantomWiki

        return phantom_answer(question, messages)
    k = KBGymKnowledge(events, final=True)
    try:
        return answer_for(question, k)
    except KBGymPending:  # a final knowledge settles every need; kept for safety
        return UNKNOWN


@dataclass
class ReactiveReader:
    """Retrieve-and-read as a policy: `pages` searches of the question, then one answer."""

    pages: int = 2
    __name__ = "reactive_reader"

    def __post_init__(self) -> None:
        if self.pages < 1:
            raise ValueError(f"reactive reader: pages must be >= 1, got {self.pages}")

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        question = task_question(messages)
        searched = sum(1 for m in messages if m["role"] == "assistant")
        budget = budget_from_prompt(messages)
        last_page = transcript(messages)[-1] if searched else None
        out_of_pages = last_page is not None and not last_page.has_more
        if searched < self.pages and not out_of_pages and (budget is None or searched < budget - 1):
            return tool_call_text("search", query=question, page=searched + 1)
        return tool_call_text("answer", text=reactive_answer(question, messages))


__all__ = ["ReactiveReader", "reactive_answer"]
