"""Build the KBGym dataset: universe, atomic-fact corpus, instance pools and instance-disjoint splits.

Splits (paper 001 §IV-A): train and test_in draw unseen instances of the
trained templates; test_out draws only from one reserved template per class;
eval mixes both (`extra["eval_part"]` is "in" or "out"). No instance appears
in two splits. Per split, questions are spread evenly over the ten classes
and, within a class, round-robin over its templates.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from librarian.datasets.kbgym.facts import Fact, build_corpus
from librarian.datasets.kbgym.templates import CLASSES, TEMPLATES, Instance, enumerate_pools
from librarian.datasets.kbgym.universe import Universe, UniverseConfig, generate_universe
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question, dumps_json

SPLITS = ("train", "test_in", "test_out", "eval")


@dataclass(frozen=True, slots=True)
class SplitSizes:
    """Questions per split; eval = eval_in (trained templates) + eval_out (reserved ones)."""

    train: int = 150
    test_in: int = 100
    test_out: int = 50
    eval_in: int = 20
    eval_out: int = 10

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if v < 0:
                raise DatasetError(f"split size {k} must be >= 0 (got {v})")


@dataclass(slots=True)
class KBGym:
    """Everything the generator made: the universe, the corpus, the pools and the bundle."""

    universe: Universe
    corpus: list[CorpusDoc]
    index: dict[Fact, str]
    pools: dict[str, list[Instance]]
    bundle: Bundle

    def pool(self, template: str) -> list[Instance]:
        """The full instance pool of one template."""
        if template not in self.pools:
            raise DatasetError(f"unknown KBGym template {template!r}; known: {sorted(self.pools)}")
        return self.pools[template]


def _per_class(total: int) -> dict[str, int]:
    base, rem = divmod(total, len(CLASSES))
    return {c: base + (1 if i < rem else 0) for i, c in enumerate(CLASSES)}


def _round_robin(names: list[str], n: int) -> dict[str, int]:
    out = dict.fromkeys(names, 0)
    for i in range(n):
        out[names[i % len(names)]] += 1
    return out


def _plan(sizes: SplitSizes) -> list[tuple[str, str, str, int]]:
    """(split, part, template, count) in drawing order."""
    plan = []
    trained = {c: [t.name for t in TEMPLATES if t.qclass == c and not t.reserved] for c in CLASSES}
    reserved = {c: [t.name for t in TEMPLATES if t.qclass == c and t.reserved] for c in CLASSES}
    for split, part, total, which in (
        ("train", "", sizes.train, trained),
        ("test_in", "", sizes.test_in, trained),
        ("test_out", "", sizes.test_out, reserved),
        ("eval", "in", sizes.eval_in, trained),
        ("eval", "out", sizes.eval_out, reserved),
    ):
        for c, n in _per_class(total).items():
            for name, k in _round_robin(which[c], n).items():
                if k:
                    plan.append((split, part, name, k))
    return plan


def instance_question(inst: Instance, qid: str, split: str, part: str, template: str, qclass: str) -> Question:
    """An instance as a `Question` (metric `set_f1`; slots and slot keys in `extra`)."""
    extra = {"slots": dumps_json(dict(inst.slots)), "slot_keys": dumps_json(list(inst.slot_keys))}
    if part:
        extra["eval_part"] = part
    return Question(
        id=qid,
        question=inst.question,
        answers=list(inst.answers),
        split=split,
        qclass=qclass,
        template=template,
        collection="kbgym",
        metric="set_f1",
        support=list(inst.support),
        keys=list(inst.keys),
        extra=extra,
    )


def draw_splits(pools: dict[str, list[Instance]], sizes: SplitSizes, seed: int) -> list[Question]:
    """Sample instance-disjoint splits from the pools (deterministic by seed)."""
    qclass = {t.name: t.qclass for t in TEMPLATES}
    order: dict[str, list[Instance]] = {}
    for name, pool in pools.items():
        shuffled = list(pool)
        random.Random(f"kbgym-splits:{seed}:{name}").shuffle(shuffled)
        order[name] = shuffled
    taken = dict.fromkeys(pools, 0)
    questions: list[Question] = []
    for split, part, name, k in _plan(sizes):
        start = taken[name]
        if start + k > len(order[name]):
            raise DatasetError(
                f"template {name} has {len(order[name])} instances but the splits need {start + k}; "
                "use more --people or smaller splits"
            )
        for inst in order[name][start:start + k]:
            questions.append(instance_question(inst, "", split, part, name, qclass[name]))
        taken[name] = start + k
    out = []
    for i, q in enumerate(questions):
        q_id = f"kbq{i:04d}"
        out.append(Question(**{**{f: getattr(q, f) for f in q.__dataclass_fields__}, "id": q_id}))
    return out


def build_kbgym(people: int = 500, seed: int = 1, sizes: SplitSizes | None = None) -> KBGym:
    """Generate the universe, its corpus, every template's pool and the four splits."""
    sizes = sizes or SplitSizes()
    u = generate_universe(UniverseConfig(people=people, seed=seed))
    corpus, index = build_corpus(u)
    pools = enumerate_pools(u, index)
    questions = draw_splits(pools, sizes, seed)
    config = {"people": people, "seed": seed, "sizes": asdict(sizes)}
    bundle = Bundle(name="kbgym", corpus=corpus, questions=questions, config=config)
    return KBGym(universe=u, corpus=corpus, index=index, pools=pools, bundle=bundle)
