"""Hint-guided GRPO for the builder (an ablation: paper 000 trains without hints, `rollout.hint_every` = 0).

When enabled, a hint comes every K_h turns of a *training* rollout, never at
evaluation. Like paper 002's hints it nudges without revealing the answer or
prescribing the path: it is conditioned on the trajectory (which sources the
builder has already consolidated) and on the hidden training questions, and
says which kind of information readers will ask about (the relation or
attribute and the entity the question turns on) that the workspace does not
consolidate yet. It never states a gold answer (of any hidden question of the
corpus) and never names a supporting document (path or id): every such string
is redacted. It reaches the builder appended to a tool observation, so it is
prompt (masked out of the loss), not something the policy is trained to say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HintReference:
    """One hidden training question: its text, gold answers, the paths of its supporting documents and its
    typed keys ("person:Ada Moss", "relation:mother"; optional: without them the question text is read)."""

    question: str
    answers: tuple[str, ...]
    support: tuple[str, ...]
    keys: tuple[str, ...] = ()


ENTITY_KINDS = ("person", "city", "job", "hobby", "date")
# words of a question that say which kind of information it asks for (relation or attribute)
_KIND_WORDS = {
    "mother": "mother", "father": "father", "spouse": "spouse", "child": "children", "children": "children",
    "grandchildren": "grandchildren", "friend": "friends", "friends": "friends", "sibling": "siblings",
    "siblings": "siblings", "parent": "parents", "parents": "parents", "job": "job", "jobs": "job",
    "works": "job", "occupation": "job", "city": "city of residence", "cities": "city of residence",
    "live": "city of residence", "lives": "city of residence", "living": "city of residence",
    "hobby": "hobby", "hobbies": "hobby", "born": "birthdate", "birthdate": "birthdate", "birthday": "birthdate",
}
_QUESTION_WORDS = {"who", "what", "which", "where", "when", "how", "whose", "is", "are", "does", "did", "in",
                   "according", "the", "a", "an", "of", "and"}
_NAME = re.compile(r"[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")


def _value(key: str) -> str:
    return key.split(":", 1)[1].strip() if ":" in key else key.strip()


def _has(text: str, s: str) -> bool:
    """Whether `s` occurs in `text` as a whole word or phrase, case-insensitively."""
    return bool(s.strip()) and re.search(rf"(?<!\w){re.escape(s.strip())}(?!\w)", text, flags=re.I) is not None


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret (answer, document path or id) replaced by '...', longest first, whole words."""
    for s in sorted({s.strip() for s in secrets if s.strip()}, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(s)}(?!\w)", "...", text, flags=re.I)
    return text


def secrets_of(references: Sequence[HintReference]) -> set[str]:
    """What no hint may contain: every gold answer and every supporting document's path and id."""
    out: set[str] = set()
    for ref in references:
        out.update(ref.answers)
        for p in ref.support:
            out.update((p, p.rsplit("/", 1)[-1]))
    return {s for s in out if s.strip()}


def _kinds(ref: HintReference) -> list[str]:
    """The relations and attributes the question turns on: relation keys, then kind words of its text."""
    kinds = [_KIND_WORDS.get(_value(k).lower(), _value(k)) for k in ref.keys if k.split(":", 1)[0] == "relation"]
    words = re.findall(r"[a-z]+", ref.question.lower())
    if "how" in words and "many" in words:
        kinds.append("counts")
    kinds += [_KIND_WORDS[w] for w in words if w in _KIND_WORDS]
    return list(dict.fromkeys(k for k in kinds if k))


def _entities(ref: HintReference) -> list[str]:
    """The names the question turns on: its entity keys, else the capitalised names of its text."""
    keyed = [_value(k) for k in ref.keys if k.split(":", 1)[0] in ENTITY_KINDS]
    if keyed:
        return list(dict.fromkeys(keyed))
    names = []
    for m in _NAME.finditer(ref.question):
        words = m.group(0).removesuffix("'s").split()
        while words and words[0].lower() in _QUESTION_WORDS:
            words = words[1:]
        if words:
            names.append(" ".join(words))
    return list(dict.fromkeys(names))


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _hint_for(ref: HintReference, secrets: set[str]) -> str:
    safe = lambda s: not any(_has(s, x) for x in secrets)  # noqa: E731
    kinds = [k for k in _kinds(ref) if safe(k)]
    entities = [e for e in _entities(ref) if safe(e)]
    if kinds and entities:
        what = f"{_and(kinds)}, in a question that turns on {_and(entities)}"
    elif entities:
        what = f"facts about {_and(entities)}"
    elif kinds:
        what = f"{_and(kinds)}"
    else:
        what = "facts that are still spread over several raw documents"
    return ("Hint: readers will ask about " + what + ", and the workspace does not consolidate that information "
            "yet. A synthetic file that gathers it (create_file) would let a reader answer in one read.")


def builder_hint(references: Sequence[HintReference], consolidated: Iterable[str], turn: int) -> str | None:
    """The hint after builder turn `turn` (1-based) about the first reference whose support is not yet all
    consolidated: which kind of information readers will ask about, never an answer or a document.

    References are taken in turn order starting at `turn`, so successive hints
    cover different questions; None when everything is consolidated.
    """
    done = set(consolidated)
    if not references:
        return None
    n = len(references)
    secrets = secrets_of(references)
    for k in range(n):
        ref = references[(turn + k) % n]
        if any(p not in done for p in ref.support):
            return scrub(_hint_for(ref, secrets), secrets)
    return None


def consolidated_sources(calls: Iterable[dict]) -> set[str]:
    """Sources named by the builder's create_file calls so far (from a trajectory's recorded calls)."""
    out: set[str] = set()
    for call in calls:
        if call.get("name") == "create_file":
            out.update(str(s) for s in call.get("arguments", {}).get("sources", []) or [])
    return out
