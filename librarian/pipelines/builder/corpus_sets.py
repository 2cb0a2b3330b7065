"""The corpus sets of a builder run: training, SFT teacher, warm-start gate, exam (hard) and keep.

Without `data.headroom` the sets are the ones `corpora.task_corpora` and
`corpora.teacher_corpora` have always drawn (no keep or gate set). With it,
every set comes from universes of its own and is checked corpus by corpus
(`headroom.check_corpora`):

- training (`train_seeds`), SFT (`sft_seeds`), gate (`val_seeds`) and hard
  exam corpora (`exam_seeds`) are ones the flat store misses and the SFT
  teacher solves, so every build can gain and the gain is reachable;
- keep corpora (`exam_seeds`, groups of `keep_min_support`..`keep_max_support`
  members) are ones the flat store already answers: the exam measures
  whether a build breaks them.

The universes of the sets must be pairwise disjoint, so the exam and the
gate hold document sets no training or SFT corpus came from. Candidates are
drawn one universe at a time in turn and kept in that order until each set
is full; too few raise a `CorpusError` that names the set and its seeds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.pipelines.builder.corpora import (
    EXAM_SPLITS,
    Corpus,
    CorpusError,
    eligible_questions,
    make_corpora,
    ordered_corpora,
    split_sizes,
    task_corpora,
    teacher_corpora,
)
from librarian.pipelines.builder.headroom import CorpusCheck, check_corpora

log = logging.getLogger(__name__)


@dataclass
class CorpusSets:
    """What a builder run trains, fine-tunes, gates and examines on; `checks` per checked corpus id."""

    train: list[Corpus]
    exam: list[Corpus]
    teacher: list[Corpus] = field(default_factory=list)
    keep: list[Corpus] = field(default_factory=list)
    gate: list[Corpus] = field(default_factory=list)
    checks: dict[str, CorpusCheck] = field(default_factory=dict)

    def everything(self) -> list[Corpus]:
        """Every corpus once (by id), for U(F_0) and the probe service's questions."""
        return list({c.corpus_id: c for c in self.train + self.exam + self.keep + self.teacher + self.gate}.values())


def candidates(data: Any, seeds: list[int] | tuple[int, ...], tag: str, min_support: int,
               max_support: int) -> list[Corpus]:
    """Every eligible question of the universes `seeds` (all splits, `min_support`..`max_support` members, the
    data's kinds) as a corpus, one universe's corpus after another's in turn; ids `<tag><seed>-<i>`, question
    ids suffixed `@<tag><seed>`."""
    sizes = split_sizes(data)
    kinds = tuple(data.question_kinds or ())
    splits = ("train", *EXAM_SPLITS)
    per_world = []
    for seed in seeds:
        world = build_kbgym(people=data.people, seed=seed, sizes=SplitSizes(**sizes))
        n = len(eligible_questions(world, splits, min_support, max_support, kinds)) // data.questions_per_corpus
        made = make_corpora(world, n, questions=data.questions_per_corpus, docs=data.docs_per_corpus, splits=splits,
                            seed=seed, prefix=f"{tag}{seed}-", max_support=max_support, question_kinds=kinds,
                            min_support=min_support, path_style=data.path_style) if n else []
        per_world.append([replace(c, questions=[replace(q, id=f"{q.id}@{tag}{seed}") for q in c.questions])
                          for c in made])
    rounds = max((len(m) for m in per_world), default=0)
    return [m[i] for i in range(rounds) for m in per_world if i < len(m)]


def checked(cfg: Any, pool: list[Corpus], count: int, keep: str, what: str, seeds: Any,
            checks: dict[str, CorpusCheck], chunk: int = 24) -> list[Corpus]:
    """The first `count` corpora of `pool` that pass (`keep`: headroom | answered), checked a chunk at a time
    (their checks added to `checks`); raises CorpusError naming `what` and its `seeds` when too few pass."""
    out: list[Corpus] = []
    for start in range(0, len(pool), chunk):
        if len(out) >= count:
            break
        part = pool[start:start + chunk]
        checks.update(check_corpora(cfg, part))
        out += [c for c in part if getattr(checks[c.corpus_id], keep)]
    if len(out) < count:
        rule = "the flat store misses and the SFT teacher solves" if keep == "headroom" else "the flat store answers"
        raise CorpusError(f"{what}: {len(out)} corpora of data seeds {list(seeds)} are ones {rule}, fewer than the "
                          f"{count} asked for: add universes or ask for fewer")
    return out[:count]


def disjoint_universes(d: Any, gate: bool = True) -> None:
    """Raise CorpusError unless the headroom sets' universes are pairwise disjoint (and each set has some); the
    gate's only when `gate` (a run that measures it)."""
    sets = {"data.train_seeds": d.train_seeds, "data.sft_seeds": d.sft_seeds, "data.exam_seeds": d.exam_seeds}
    if d.val_corpora and gate:
        sets["data.val_seeds"] = d.val_seeds
    empty = [k for k, v in sets.items() if not v]
    if empty:
        raise CorpusError(f"data.headroom draws every set from universes of its own: name them in {', '.join(empty)}")
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = sorted(set(sets[a]) & set(sets[b]))
            if shared:
                raise CorpusError(f"{a} and {b} share universes {shared}: the exam and the gate must hold document "
                                  "sets no training or SFT corpus came from")


def corpus_sets(cfg: Any, exam: bool = True, only_exam: bool = False) -> CorpusSets:
    """A `train_builder` config's corpus sets (see the module docstring); `exam=False` leaves out the exam and
    keep sets, `only_exam=True` everything else (the exam of a saved policy)."""
    d = cfg.data
    teacher_count = cfg.sft.corpora if cfg.sft.enabled and not cfg.sft.init_from and not only_exam else 0
    if not d.headroom:
        _, train, held = task_corpora(d, exam=exam)
        return CorpusSets([] if only_exam else train, held,
                          teacher_corpora(d, train, teacher_count) if teacher_count else [])
    disjoint_universes(d, gate=not only_exam)
    checks: dict[str, CorpusCheck] = {}
    low, high = d.train_min_support or d.min_support, d.max_support

    def hard(seeds: Any, tag: str, count: int, what: str) -> list[Corpus]:
        return checked(cfg, candidates(d, seeds, tag, low, high), count, "headroom", what, seeds, checks) \
            if count else []

    train = [] if only_exam else ordered_corpora(hard(d.train_seeds, "w", d.train_corpora, "data.train_corpora"),
                                                 list(d.train_order))
    teacher = hard(d.sft_seeds, "s", teacher_count, "sft.corpora")
    gate = [] if only_exam else hard(d.val_seeds, "v", d.val_corpora, "data.val_corpora")
    held = hard(d.exam_seeds, "x", d.exam_corpora, "data.exam_corpora") if exam else []
    keep = checked(cfg, candidates(d, d.exam_seeds, "k", d.keep_min_support, d.keep_max_support), d.keep_corpora,
                   "answered", "data.keep_corpora", d.exam_seeds, checks) if exam and d.keep_corpora else []
    log.info("corpora with headroom: %d training, %d SFT, %d gate, %d exam; %d keep (checked %d)", len(train),
             len(teacher), len(gate), len(held), len(keep), len(checks))
    return CorpusSets(train, held, teacher, keep, gate, checks)
