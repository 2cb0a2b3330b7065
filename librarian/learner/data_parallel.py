"""A learner's place in its data-parallel group and the reductions an update makes over the group's ranks.

Each rank's `step` gets its share of the batch (`Ranks.shard`). Before the
update the whole batch's sample and token counts are all-reduced
(`whole_batch`), so every rank normalises its loss as one learner on the
whole batch would; after it the loss terms, the clip metrics and the token
count are all-reduced (`UpdateTotals.summed`), so every rank reports the
whole batch's figures. A single learner (`world` 1) reduces nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch  # noqa: TID253 (tensor code throughout)

from librarian.learner.batch import PolicySample, split
from librarian.learner.engine import data_parallel
from librarian.learner.errors import LearnerError

LOSS_TERMS = ("entropy", "kl", "loss", "pg_loss")
NO_VERSION = float(2**52)  # what `oldest_version` compares against when no sample knows its version


@dataclass(frozen=True)
class Ranks:
    """This process's rank in the learner group, the group's size, and the device its reductions run on."""

    rank: int
    world: int
    device: Any

    @classmethod
    def joined(cls, device: Any) -> Ranks:
        """The torch.distributed group this process has joined (rank 0 of 1 outside one)."""
        rank, world = data_parallel()
        return cls(rank, world, device)

    def all_reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """`values` summed (`op` 'sum') or their minimum ('min') over the ranks (float64)."""
        if self.world == 1:
            return [float(v) for v in values]
        import torch.distributed as dist

        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MIN)
        return t.tolist()

    def shard(self, samples: Sequence[PolicySample]) -> list[PolicySample]:
        """This rank's contiguous share of a batch every rank holds (all of it on a single learner)."""
        if self.world == 1:
            return list(samples)
        if len(samples) < self.world:
            raise LearnerError(f"a batch of {len(samples)} samples cannot be split over {self.world} learner ranks")
        return split(samples, self.world)[self.rank]

    def whole_batch(self, samples: Sequence[PolicySample]) -> tuple[int, dict[str, int]]:
        """The whole batch's sample count (this rank's share summed over the ranks) and verl's batch info (its
        trained tokens and sequences): the normalisation of one learner on all of it."""
        trained = [sum(s.loss_mask[1:]) for s in samples]
        n, tokens, seqs = self.all_reduce([len(samples), sum(trained), sum(1 for k in trained if k)])
        return int(n), {"dp_size": self.world, "batch_num_tokens": max(1, int(tokens)),
                        "global_batch_size": max(1, int(seqs))}

    def oldest_version(self, samples: Sequence[PolicySample]) -> float:
        """The oldest policy version any rank's samples came from; `NO_VERSION` when none knows its version."""
        mine = min((s.policy_version for s in samples if s.policy_version >= 0), default=NO_VERSION)
        return self.all_reduce([mine], "min")[0]


@dataclass
class UpdateTotals:
    """One rank's sums over an update: the loss terms (its share of each: the micro-batch's value x weight /
    world, since gradients are averaged over the ranks), the clip metrics (weighted by the micro-batch's share
    of the whole batch) and the tokens it ran."""

    terms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LOSS_TERMS, 0.0))
    clip: dict[str, float] = field(default_factory=dict)
    tokens: int = 0

    def add(self, terms: dict[str, float], metrics: dict[str, float], weight: float, share: float,
            world: int) -> None:
        """One micro-batch's loss terms and clip metrics (`weight` 0: a filler pass that counts for nothing)."""
        for k, v in terms.items():
            self.terms[k] += weight * v / world
        for k, v in metrics.items():
            self.clip[k] = self.clip.get(k, 0.0) + share * v

    def summed(self, ranks: Ranks) -> UpdateTotals:
        """The whole batch's totals: every rank's summed (one all-reduce)."""
        keys = sorted(self.terms) + sorted(self.clip)
        values = ranks.all_reduce([self.terms.get(k, self.clip.get(k, 0.0)) for k in keys] + [self.tokens])
        out = dict(zip(keys, values, strict=False))
        return UpdateTotals({k: out[k] for k in sorted(self.terms)}, {k: out[k] for k in sorted(self.clip)},
                            int(values[-1]))
