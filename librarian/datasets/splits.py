"""The shared split scheme for externally generated questions (PhantomWiki).

Reserved templates feed test_out and the "out" half of eval; the others feed
train, test_in and the "in" half of eval, round-robin over templates. Every
question lands in at most one split. `assign_splits` fills fixed sizes (all
shrinking by one common factor when the questions cannot fill them);
`assign_proportional` places every question, the sizes read as proportions.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import asdict, dataclass, replace

from librarian.datasets.records import DatasetError, Question


@dataclass(frozen=True, slots=True)
class Sizes:
    """Questions per split (eval = eval_in + eval_out)."""

    train: int = 150
    test_in: int = 100
    test_out: int = 50
    eval_in: int = 20
    eval_out: int = 10

    def scaled(self, factor: float) -> Sizes:
        return Sizes(*(int(v * factor) for v in (self.train, self.test_in, self.test_out,
                                                  self.eval_in, self.eval_out)))


def _take_round_robin(groups: dict[str, list[Question]], n: int) -> list[Question]:
    out: list[Question] = []
    names = sorted(groups)
    while len(out) < n and any(groups[t] for t in names):
        for t in names:
            if groups[t] and len(out) < n:
                out.append(groups[t].pop(0))
    return out


def take_balanced(questions: list[Question], n: int) -> list[Question]:
    """The first n questions taking question classes in turn, in first-seen class order (all when n < 0).

    A split lists its questions class by class, so its first n would all be of
    the first classes; this keeps small samples balanced.
    """
    if n < 0 or n >= len(questions):
        return list(questions)
    by_class: dict[str, list[Question]] = {}
    for q in questions:
        by_class.setdefault(q.qclass, []).append(q)
    out: list[Question] = []
    while len(out) < n:
        for queue in by_class.values():
            if queue and len(out) < n:
                out.append(queue.pop(0))
    return out


def _shares(total: int, weights: tuple[int, ...]) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders; the shares sum to `total`)."""
    if total <= 0 or sum(weights) <= 0:
        return [0] * len(weights)
    exact = [total * w / sum(weights) for w in weights]
    out = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: (out[i] - exact[i], i))[: total - sum(out)]:
        out[i] += 1
    return out


def _reserve(questions: list[Question], reserved: int, seed: int) -> tuple[list[str], dict[str, list[Question]]]:
    """The reserved templates (drawn by the seed) and every template's questions, shuffled."""
    templates = sorted({q.template for q in questions})
    if len(templates) <= reserved:
        raise DatasetError(f"need more than {reserved} templates to reserve {reserved} for test_out; "
                           f"got {len(templates)}")
    rng = random.Random(f"splits:{seed}")
    held = sorted(rng.sample(templates, reserved))
    groups: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        groups[q.template].append(q)
    for t in groups:
        rng.shuffle(groups[t])
    return held, groups


def _place(plan: list[tuple[str, str, int, dict[str, list[Question]]]]) -> list[Question]:
    result: list[Question] = []
    for split, part, n, pool in plan:
        for q in _take_round_robin(pool, n):
            extra = dict(q.extra)
            if part:
                extra["eval_part"] = part
            result.append(replace(q, split=split, extra=extra))
    return result


def assign_proportional(questions: list[Question], sizes: Sizes, reserved: int, seed: int
                        ) -> tuple[list[Question], dict[str, object]]:
    """Every question placed: the trained templates' questions shared among train, test_in and eval (in)
    in the proportions of `sizes`, the reserved templates' among test_out and eval (out)."""
    held, groups = _reserve(questions, reserved, seed)
    trained = {t: v for t, v in groups.items() if t not in held}
    out_groups = {t: v for t, v in groups.items() if t in held}
    n_in = sum(len(v) for v in trained.values())
    n_out = sum(len(v) for v in out_groups.values())
    train, test_in, eval_in = _shares(n_in, (sizes.train, sizes.test_in, sizes.eval_in))
    test_out, eval_out = _shares(n_out, (sizes.test_out, sizes.eval_out))
    used = Sizes(train, test_in, test_out, eval_in, eval_out)
    result = _place([("train", "", train, trained), ("test_in", "", test_in, trained),
                     ("eval", "in", eval_in, trained), ("test_out", "", test_out, out_groups),
                     ("eval", "out", eval_out, out_groups)])
    need = sizes.train + sizes.test_in + sizes.test_out + sizes.eval_in + sizes.eval_out
    record = {"reserved_templates": held, "sizes": asdict(used), "scale": round(len(result) / need, 4) if need else 0}
    return result, record


def assign_splits(questions: list[Question], sizes: Sizes, reserved: int, seed: int
                  ) -> tuple[list[Question], dict[str, object]]:
    """Questions with their split set, and a record of the reserved templates and sizes used."""
    held, groups = _reserve(questions, reserved, seed)
    n_in = sum(len(v) for t, v in groups.items() if t not in held)
    n_out = sum(len(v) for t, v in groups.items() if t in held)
    need_in = sizes.train + sizes.test_in + sizes.eval_in
    need_out = sizes.test_out + sizes.eval_out
    factor = min(1.0, n_in / need_in if need_in else 1.0, n_out / need_out if need_out else 1.0)
    used = sizes if factor >= 1.0 else sizes.scaled(factor)
    trained = {t: v for t, v in groups.items() if t not in held}
    out_groups = {t: v for t, v in groups.items() if t in held}
    result = _place([("train", "", used.train, trained), ("test_in", "", used.test_in, trained),
                     ("test_out", "", used.test_out, out_groups), ("eval", "in", used.eval_in, trained),
                     ("eval", "out", used.eval_out, out_groups)])
    record = {"reserved_templates": held, "sizes": asdict(used), "scale": round(factor, 4)}
    return result, record
