"""The scripted PhantomWiki curator: indexes the kinship relations a question's chain runs through.

Given a backward-pass task, it names the question's keys the way its
wording composes them: each person the chain reaches and the kinship term
applied to them ("the great-grandmother of <the person whose occupation is
sound technician>"). It evaluates the chain with the reader's own steps
(`scripted.phantom_reader.Knowledge`: ranked search, paged until the
results drift) and, for every term of more than one step whose members it
found, makes sure a relation index exists:

    add("Index great_grandmother_of_vicki_hackworth", links=[facts])

"An index points; it does not list": its text is only its key, one word no
fact holds (the term and the person's name), and the reader's searches from
that person carry the keys of the terms they evaluate, so the index ranks
first for exactly those searches and takes no result slot from anything
else. Its links are the fact sentences that state each member (the last
step of the term's path, e.g. "The mother of <grandparent> is <member>.").
An index it finds already (in a result page) is read and trusted, and
nothing is changed; a term with no members, or a member without a stating
fact in view, gets no index, and an index the near-duplicate guard merged an
add into is deleted (precision before completeness). It rebuilds its state from its transcript
every turn and never sees the universe; the gold answer is not used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from librarian.models.base import Message, ToolSchema
from librarian.models.scripted.base import task_question, tool_call_text
from librarian.models.scripted.kbgym import Event, budget_from_prompt, transcript
from librarian.models.scripted.phantom import BASE_RELATIONS, KIN, STATED, is_phantom_question
from librarian.models.scripted.phantom_reader import (
    PhantomKnowledge,
    PhantomPending,
    answer_for,
    index_key,
    index_text,
    next_action,
    norm,
)

MAX_LINKS_PER_CALL = 40
_MERGED = re.compile(r"near-duplicate of '([^']+)'")


def last_base(term: str) -> str:
    """The base relation a term's path ends with ("great_grandmother" -> "parent")."""
    while term not in BASE_RELATIONS:
        term = KIN[term].path[-1]
    return term


def witnesses(k: PhantomKnowledge, term: str, members: set[str]) -> list[str] | None:
    """One fact id per member stating it as the object of the term's last step; None if one is missing."""
    base = last_base(term)
    links = []
    for member in sorted(members):
        ids = sorted(doc for f, doc in k.fact_ids.items()
                     if f.obj == member and f.rel in STATED and STATED[f.rel][0] == base)
        if not ids:
            return None
        links.append(ids[0])
    return list(dict.fromkeys(links))


def attempted(events: Sequence[Event]) -> set[str]:
    """Normalised texts of the indexes this pass already added (or tried to add)."""
    return {norm(str(e.arguments.get("text", ""))) for e in events if e.name == "add"}


def merged_into(events: Sequence[Event]) -> list[str]:
    """Documents an add of this pass was merged into by the near-duplicate guard, not yet deleted: they
    now hold links of two keys, so they are deleted (precision before completeness)."""
    deleted = {str(e.arguments.get("id")) for e in events if e.name == "delete"}
    found = [m[1] for e in events if e.name == "add" and (m := _MERGED.search(e.observation))]
    return [x for x in dict.fromkeys(found) if x not in deleted]


def next_edit(question: str, messages: Sequence[Message]) -> str:
    """The curator's next call for a PhantomWiki question."""
    events = transcript(messages)
    for doc_id in merged_into(events):
        return tool_call_text("delete", id=doc_id)
    budget = budget_from_prompt(messages)
    used = sum(1 for m in messages if m["role"] == "assistant")
    k = PhantomKnowledge(events)
    try:
        answer_for(question, k)
    except PhantomPending as pending:
        if budget is None or used < budget - 1:
            return next_action(pending.need, k)
    tried = attempted(events)
    for (person, term), members in sorted(k.derived.items()):
        text = index_text(term, person)
        if not members or norm(text) in tried or index_key(term, person) in k.indexes:
            continue
        links = witnesses(k, term, members)
        if links and len(links) <= MAX_LINKS_PER_CALL:
            return tool_call_text("add", text=text, links=links)
    return tool_call_text("done")


class PhantomCurator:
    """The scripted PhantomWiki curator as a policy `(messages, tools) -> assistant message`."""

    __name__ = "phantom_curator"

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSchema] | None = None) -> str:
        question = task_question(messages)
        if not is_phantom_question(question):
            return tool_call_text("done")
        return next_edit(question, messages)


__all__ = ["PhantomCurator", "last_base", "next_edit", "witnesses"]
