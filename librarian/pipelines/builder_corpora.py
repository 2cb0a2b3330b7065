"""Builder corpora from one KBGym universe: small document sets, each with hidden questions.

A corpus is the support of a few questions plus distractor facts about the
same people (then random facts), capped at `docs` documents, under
`facts/<id>`. Training corpora take train-split questions; exam corpora take
questions from the other splits, so the exam never reuses a training corpus.
The builder sees only the documents; the questions are the probes' hidden
questions (and, in training, the hints' reference answers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from librarian.cluster.hints import HintReference


@dataclass
class Corpus:
    """A builder's task: raw documents and the hidden questions a reader will be asked about them."""

    corpus_id: str
    docs: list  # librarian.workspace.Document
    questions: list  # librarian.datasets.records.Question

    def hints(self) -> list[HintReference]:
        ids = {d.id: d.path for d in self.docs}
        return [HintReference(q.question, tuple(q.answers), tuple(ids[s] for s in q.support if s in ids))
                for q in self.questions]


class CorpusError(ValueError):
    """Not enough questions or documents for the corpora asked for."""


def make_corpora(kbgym: Any, count: int, questions: int, docs: int, splits: tuple[str, ...], seed: int,
                 prefix: str, max_support: int = 3) -> list[Corpus]:
    """`count` corpora of `questions` questions each (from `splits`), `docs` documents at most."""
    from librarian.datasets import to_documents

    all_docs = {d.id: replace(d, path=f"facts/{d.id}") for d in to_documents(kbgym.corpus)}
    by_title: dict[str, list[str]] = {}
    for d in all_docs.values():
        by_title.setdefault(str(d.metadata.get("title", "")), []).append(d.id)
    pool = [q for q in kbgym.bundle.questions if q.split in splits and 0 < len(q.support) <= max_support]
    rng = random.Random(seed)
    rng.shuffle(pool)
    if len(pool) < count * questions:
        raise CorpusError(f"{len(pool)} questions with at most {max_support} supporting facts in splits {splits}; "
                          f"{count} corpora x {questions} questions need {count * questions}")
    out: list[Corpus] = []
    for i in range(count):
        qs = pool[i * questions:(i + 1) * questions]
        chosen = list(dict.fromkeys(s for q in qs for s in q.support))
        if len(chosen) > docs:
            raise CorpusError(f"corpus {prefix}{i}: its questions need {len(chosen)} documents, more than docs={docs}")
        related = [i2 for s in chosen for i2 in by_title.get(str(all_docs[s].metadata.get("title", "")), [])]
        for extra in list(dict.fromkeys(related)) + rng.sample(sorted(all_docs), len(all_docs)):
            if len(chosen) >= docs:
                break
            if extra not in chosen:
                chosen.append(extra)
        out.append(Corpus(f"{prefix}{i}", [all_docs[d] for d in sorted(chosen)], qs))
    return out
