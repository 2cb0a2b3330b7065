"""Key-coverage gradient groups (paper 001 §VII-B).

For the trained two-slot templates, draw from their full instance pools
questions whose slot keys the train split covers fully ("both"), partly
("one") or not at all ("neither"), plus train questions themselves
("trained"). Drawn instances are outside every split.
"""

from __future__ import annotations

import json
import random

from librarian.datasets.kbgym.build import KBGym, instance_question
from librarian.datasets.kbgym.templates import TEMPLATES
from librarian.datasets.records import DatasetError, Question

GROUPS = ("trained", "both", "one", "neither")


def two_slot_templates() -> list[str]:
    """Trained (not reserved) templates whose instances name exactly two slot keys."""
    return [
        "qc6_city_job", "qc6_city_hobby", "qc7_common_friends",
        "qc7_friend_in_city", "qc8_city_hobby_count", "qc10_parent_job",
    ]


def _check_templates(names: list[str]) -> None:
    reserved = {t.name for t in TEMPLATES if t.reserved}
    for n in names:
        if n in reserved:
            raise DatasetError(f"template {n} is reserved for test_out; the gradient uses trained templates")


def gradient_groups(kb: KBGym, n: int = 30, seed: int = 1, templates: list[str] | None = None
                    ) -> dict[str, list[Question]]:
    """Up to `n` questions per group (fewer when a pool runs out), split named `gradient_<group>`."""
    names = templates or two_slot_templates()
    _check_templates(names)
    train = kb.bundle.split("train")
    covered = {k for q in train for k in json.loads(q.extra["slot_keys"])}
    used = {(q.template, q.extra["slots"]) for q in kb.bundle.questions}
    rng = random.Random(f"kbgym-gradient:{seed}")
    buckets: dict[str, list[Question]] = {g: [] for g in GROUPS}
    trained = [q for q in train if q.template in names]
    rng.shuffle(trained)
    buckets["trained"] = [_as_group(q, "trained", q.id) for q in trained[:n]]
    candidates: dict[str, list[Question]] = {g: [] for g in GROUPS[1:]}
    qclass = {t.name: t.qclass for t in TEMPLATES}
    for name in names:
        for inst in kb.pool(name):
            q = instance_question(inst, "", "", "", name, qclass[name])
            if (name, q.extra["slots"]) in used:
                continue
            hits = sum(k in covered for k in inst.slot_keys)
            group = {2: "both", 1: "one", 0: "neither"}.get(hits)
            if group and len(inst.slot_keys) == 2:
                candidates[group].append(q)
    for group, pool in candidates.items():
        rng.shuffle(pool)
        buckets[group] = [_as_group(q, group, f"kbg-{group}-{i:03d}") for i, q in enumerate(pool[:n])]
    return buckets


def _as_group(q: Question, group: str, qid: str) -> Question:
    fields = {f: getattr(q, f) for f in q.__dataclass_fields__}
    fields["split"] = f"gradient_{group}"
    fields["id"] = qid
    return Question(**fields)
