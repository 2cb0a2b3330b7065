"""Builder corpora from one KBGym universe: small document sets, each with hidden questions.

A corpus is the support of a few questions plus distractor facts about the
same people (then random facts), capped at `docs` documents, under
`facts/<id>`. Training corpora take train-split questions; exam corpora take
questions from the other splits, so the exam never reuses a training corpus.
The builder sees only the documents; the questions are the probes' hidden
questions (and, in training, the hints' reference answers).

Options for tasks where structure matters (`configs/learning_builder.yaml`):
`question_kinds` keeps questions of some templates or classes (e.g. the
aggregations over a city or job: counts, superlatives, joins),
`min_support` keeps questions that need at least that many facts (large
groups: several result pages for a flat-store reader), and
`path_style="sentence"` names each file `facts/<id> <its sentence>`, so a
builder sees what a file states in a listing without spending a read on it
(the reader's search does not score paths); `path_style="top"` names it
`<id> <sentence>` at the top of the workspace, so a small corpus's files
all show in the builder's task message (`build_task(ws, listing_lines)`)
and the builder needs no `list` action either.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from librarian.datasets import to_documents
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.roles.builder_hints import HintReference


@dataclass
class Corpus:
    """A builder's task: raw documents and the hidden questions a reader will be asked about them."""

    corpus_id: str
    docs: list  # librarian.workspace.Document
    questions: list  # librarian.datasets.records.Question

    def hints(self) -> list[HintReference]:
        ids = {d.id: d.path for d in self.docs}
        return [HintReference(q.question, tuple(q.answers), tuple(ids[s] for s in q.support if s in ids),
                              tuple(q.keys)) for q in self.questions]


class CorpusError(ValueError):
    """Not enough questions or documents for the corpora asked for."""


PATH_STYLES = ("id", "sentence", "top")


def doc_path(doc_id: str, text: str, style: str = "id") -> str:
    """A corpus file's path: `facts/<id>`, `facts/<id> <sentence without its final period>` or (style
    `top`) `<id> <sentence ...>` at the top level."""
    if style == "id":
        return f"facts/{doc_id}"
    if style in ("sentence", "top"):
        sentence = " ".join(text.split()).rstrip(".").replace("/", "-")
        return f"{'facts/' if style == 'sentence' else ''}{doc_id} {sentence}"
    raise CorpusError(f"path_style must be one of {', '.join(PATH_STYLES)}, got {style!r}")


def kind_matches(q: Any, kinds: tuple[str, ...] | list[str]) -> bool:
    """True when `kinds` is empty or names the question's template (`qc9_oldest_in_city`) or class (`QC9`)."""
    return not kinds or q.template in kinds or q.qclass in kinds


def eligible_questions(kbgym: Any, splits: tuple[str, ...], min_support: int, max_support: int,
                       kinds: tuple[str, ...]) -> list[Any]:
    """The universe's questions in `splits` with `min_support`..`max_support` supporting facts and one of `kinds`."""
    return [q for q in kbgym.bundle.questions
            if q.split in splits and max(1, min_support) <= len(q.support) <= max_support and kind_matches(q, kinds)]


def make_corpora(kbgym: Any, count: int, questions: int, docs: int, splits: tuple[str, ...], seed: int,
                 prefix: str, max_support: int = 3, question_kinds: tuple[str, ...] | list[str] = (),
                 min_support: int = 1, path_style: str = "id") -> list[Corpus]:
    """`count` corpora of `questions` questions each (from `splits`), `docs` documents at most.

    Questions have between `min_support` and `max_support` supporting facts
    and, when `question_kinds` is given, one of those templates or classes.
    """
    kinds = tuple(question_kinds or ())
    all_docs = {d.id: replace(d, path=doc_path(d.id, d.text, path_style)) for d in to_documents(kbgym.corpus)}
    by_title: dict[str, list[str]] = {}
    for d in all_docs.values():
        by_title.setdefault(str(d.metadata.get("title", "")), []).append(d.id)
    pool = eligible_questions(kbgym, splits, min_support, max_support, kinds)
    rng = random.Random(seed)
    rng.shuffle(pool)
    if len(pool) < count * questions:
        what = f" of kinds {', '.join(kinds)}" if kinds else ""
        raise CorpusError(f"{len(pool)} questions{what} with {max(1, min_support)}..{max_support} supporting facts in "
                          f"splits {splits}; {count} corpora x {questions} questions need {count * questions}")
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


EXAM_SPLITS = ("test_in", "test_out", "eval")


def split_sizes(data: Any) -> dict[str, int]:
    """A universe's split sizes: `data.split_sizes` over the pipeline's defaults (train: 4 questions a training
    corpus, at least 30)."""
    sizes = {"train": max(30, data.train_corpora * 4), "test_in": 20, "test_out": 10, "eval_in": 5, "eval_out": 5}
    sizes.update(dict(getattr(data, "split_sizes", None) or {}))
    return sizes


def task_corpora(data: Any, exam: bool = True) -> tuple[Any, list[Corpus], list[Corpus]]:
    """(KBGym, training corpora, exam corpora) as a `BuilderDataConfig` describes them.

    The universe's split sizes are `data.split_sizes` over the pipeline's
    defaults (train: 4 questions a training corpus, at least 30); the new
    options (`question_kinds`, `min_support`, `path_style`) apply to both
    sets of corpora; `train_min_support` (when > 0) replaces `min_support`
    for the training corpora, and `train_seed` (when set and not `seed`)
    draws them from every split of another universe, so a task can train on
    questions with headroom while its exam keeps `seed`'s held-out splits;
    `train_seeds` (when not empty) draws them from several universes in turn
    (`universe_corpora`), so that steps with `train_corpora` >= steps x
    batch_size never revisit a corpus.
    """
    sizes = split_sizes(data)
    kbgym = build_kbgym(people=data.people, seed=data.seed, sizes=SplitSizes(**sizes))
    common: dict[str, Any] = dict(
        questions=data.questions_per_corpus, docs=data.docs_per_corpus, seed=data.seed, max_support=data.max_support,
        question_kinds=tuple(getattr(data, "question_kinds", None) or ()), path_style=getattr(data, "path_style", "id"))
    min_support = getattr(data, "min_support", 1)
    train_seed = getattr(data, "train_seed", None)
    train_world, train_splits = kbgym, ("train",)
    if train_seed is not None and train_seed != data.seed:  # another world: all of it is training material
        train_world = build_kbgym(people=data.people, seed=train_seed, sizes=SplitSizes(**sizes))
        train_splits = ("train", *EXAM_SPLITS)
    train_seeds = list(getattr(data, "train_seeds", None) or ())
    if train_seeds:  # many universes, one corpus of each in turn: every step trains on fresh corpora
        train = universe_corpora(data, train_seeds, data.train_corpora, "w", "data.train_seeds", interleave=True)
        if len(train) < data.train_corpora:
            raise CorpusError(f"data.train_seeds {train_seeds} hold {len(train)} training corpora, fewer than "
                              f"data.train_corpora={data.train_corpora}: add universes or lower train_corpora")
    else:
        train = make_corpora(train_world, data.train_corpora, splits=train_splits, prefix="c",
                             min_support=getattr(data, "train_min_support", 0) or min_support, **common)
    if train_world is not kbgym and not train_seeds:  # question ids count within a universe: keep the other world's apart
        train = [replace(c, questions=[replace(q, id=f"{q.id}@w{train_seed}") for q in c.questions]) for c in train]
    train = ordered_corpora(train, list(getattr(data, "train_order", None) or ()))
    held = make_corpora(kbgym, data.exam_corpora, splits=EXAM_SPLITS, prefix="x", min_support=min_support,
                        **common) if exam else []
    return kbgym, train, held


def ordered_corpora(train: list[Corpus], order: list[str]) -> list[Corpus]:
    """The training corpora in the order the GRPO steps take them (in rotation): `order` names corpus ids (a name
    may repeat, to revisit a corpus); empty keeps `train` as generated. Raises CorpusError naming any id that is
    not a generated training corpus."""
    if not order:
        return train
    by_id = {c.corpus_id: c for c in train}
    unknown = [name for name in order if name not in by_id]
    if unknown:
        have = f"{train[0].corpus_id} .. {train[-1].corpus_id}" if train else "none"
        raise CorpusError(f"data.train_order names {', '.join(map(repr, unknown))}, not among the {len(train)} "
                          f"training corpora ({have}): raise data.train_corpora or fix the names")
    return [by_id[name] for name in order]


def universe_corpora(data: Any, seeds: list[int] | tuple[int, ...], count: int, tag: str, key: str,
                     interleave: bool = False) -> list[Corpus]:
    """Up to `count` corpora from the universes `seeds`, drawn as training corpora are (every split,
    `train_min_support` (or `min_support`)..`max_support` members; corpus ids `<tag><seed>-<i>`, questions
    suffixed `@<tag><seed>`): all of each universe's questions before the next, or with `interleave` one
    corpus of each universe in turn (so consecutive steps train on different universes). `key` names the config
    field that lists the seeds, for errors."""
    sizes = split_sizes(data)
    kinds = tuple(getattr(data, "question_kinds", None) or ())
    splits = ("train", *EXAM_SPLITS)
    low = getattr(data, "train_min_support", 0) or getattr(data, "min_support", 1)
    worlds = []
    for seed in seeds:
        if seed == data.seed:
            raise CorpusError(f"{key} holds the exam's universe {seed} (data.seed): the exam would leak")
        world = build_kbgym(people=data.people, seed=seed, sizes=SplitSizes(**sizes))
        available = len(eligible_questions(world, splits, low, data.max_support, kinds)) // data.questions_per_corpus
        worlds.append((seed, world, available))
    wanted = {seed: 0 for seed, _, _ in worlds}
    if interleave:  # one corpus a universe in turn, skipping the exhausted ones
        while sum(wanted.values()) < count and any(wanted[seed] < n for seed, _, n in worlds):
            for seed, _, n in worlds:
                if sum(wanted.values()) < count and wanted[seed] < n:
                    wanted[seed] += 1
    else:
        for seed, _, n in worlds:
            wanted[seed] = min(n, count - sum(wanted.values()))
    per_world = []
    for seed, world, _ in worlds:
        made = make_corpora(world, wanted[seed], questions=data.questions_per_corpus, docs=data.docs_per_corpus,
                            splits=splits, seed=seed, prefix=f"{tag}{seed}-", max_support=data.max_support,
                            question_kinds=kinds, min_support=low, path_style=getattr(data, "path_style", "id")
                            ) if wanted[seed] else []
        per_world.append([replace(c, questions=[replace(q, id=f"{q.id}@{tag}{seed}") for q in c.questions])
                          for c in made])
    if not interleave:
        return [c for made in per_world for c in made][:count]
    rounds = max((len(m) for m in per_world), default=0)
    return [m[i] for i in range(rounds) for m in per_world if i < len(m)][:count]


def sft_corpora(data: Any, count: int) -> list[Corpus]:
    """Up to `count` teacher corpora from the universes `data.sft_seeds` (`universe_corpora`, tag `s`), all of
    each universe's questions before the next; [] without seeds."""
    return universe_corpora(data, getattr(data, "sft_seeds", None) or (), count, "s", "data.sft_seeds")


def teacher_corpora(data: Any, train: list[Corpus], count: int) -> list[Corpus]:
    """The SFT teacher's `count` corpora: the training corpora, then those of `data.sft_seeds`; only the latter
    when `data.sft_from_train` is false (raises CorpusError when it has no `sft_seeds` to draw from)."""
    if getattr(data, "sft_from_train", True):
        return (train + sft_corpora(data, count - len(train)))[:count]
    if count > 0 and not getattr(data, "sft_seeds", None):
        raise CorpusError("data.sft_from_train=false takes the SFT teacher's corpora from data.sft_seeds, which is "
                          "empty: name universes there (e.g. data.sft_seeds=[9,10,11]) or set sft_from_train=true")
    return sft_corpora(data, count)[:count]
