"""The builder's RL task (paper 000): corpora in rotation, probe rewards, the SFT teacher's verified builds.

`BuilderTask` is what the step loop (`librarian.rl.loop`) runs: `jobs` (a
step's `batch_size` corpora, `group_size` builds each, hints only when
`rollout.hint_every > 0`), `turn_rewards` (probe utilities -> per-turn
rewards, tokenless turns folded onto the turns the learner trains on),
`metrics` and `rows`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from librarian.cluster.builder_jobs import BuildJob
from librarian.learner.sft import verified_samples
from librarian.pipelines.builder.corpora import Corpus
from librarian.rewards.construction import ProbeService, RolloutRewards, fold_tokenless, step_rewards
from librarian.rl.protocols import RolloutSession
from librarian.rl.samples import executed_call_rate, valid_call_rate
from librarian.rl.task import Scored, job_seed, rotation
from librarian.workspace import Workspace
from librarian.workspace.snapshot import freeze


def initial_utilities(corpora: Sequence[Corpus], probes: ProbeService) -> dict[str, float]:
    """U(F_0) of every corpus's flat store (the flat stores probed in one batch)."""
    flat = [(freeze(Workspace.from_documents(c.docs)), c.corpus_id) for c in corpora]
    return dict(zip([c.corpus_id for c in corpora], probes.utilities(flat), strict=True))


class BuilderTask:
    """The builder's GRPO task over the training corpora; rewards through `probes`, U(F_0) from `initial`."""

    def __init__(self, cfg: Any, corpora: Sequence[Corpus], probes: ProbeService, initial: dict[str, float]) -> None:
        self.cfg = cfg
        self.corpora = list(corpora)
        self.probes = probes
        self.initial = initial

    def jobs(self, step: int, version: int) -> list[BuildJob]:
        """The step's `batch_size` corpora, `group_size` builds each. Without hints a step's corpora are spread over
        at most `rollout.workers` jobs, each built in one episode batch (one GRPO group a corpus); with hints (a
        job's hints are one corpus's) every corpus is its own job."""
        hints, learner = self.cfg.rollout.hint_every > 0, self.cfg.learner
        chosen = rotation(self.corpora, step, learner.batch_size)
        if hints or len(chosen) == 1:
            return [BuildJob(f"s{step}-b{b}-{c.corpus_id}", c.corpus_id, c.docs, group_size=learner.group_size,
                             seed=job_seed(self.cfg.seed, step, b), min_version=version,
                             hints=c.hints() if hints else []) for b, c in chosen]
        lanes = min(len(chosen), max(1, self.cfg.rollout.workers))
        return [BuildJob(f"s{step}-b{w}", "", [], group_size=learner.group_size, seed=job_seed(self.cfg.seed, step, w),
                         min_version=version, corpora=[(c.corpus_id, c.docs) for b, c in chosen if b % lanes == w])
                for w in range(lanes)]

    def rewards(self, records: Sequence[Any]) -> list[RolloutRewards]:
        """Each build's per-turn rewards (every turn), U(F_0), probe utilities and U(F_T); the step's snapshots
        probed in one batch."""
        return step_rewards(records, self.initial, self.probes, self.cfg.reward)

    def turn_rewards(self, records: list[Any]) -> tuple[list[list[float]], list[RolloutRewards]]:
        details = self.rewards(records)
        return [fold_tokenless(w.turn_rewards, [t.has_tokens for t in r.trajectory.turns])
                for r, w in zip(records, details, strict=True)], details

    def metrics(self, scored: Scored) -> dict[str, float]:
        """Reward, utility and probe figures of a step (means over its builds)."""
        rw: list[RolloutRewards] = scored.details
        if not rw:
            return {}
        mean = statistics.fmean
        deltas = [d for w in rw for d in _probe_deltas(w)]
        trajs = [r.trajectory for r in scored.records]
        return {
            "reward": mean(sum(w.turn_rewards) for w in rw),
            "sparse_reward": mean(w.sparse for w in rw),
            "final_utility": mean(w.final for w in rw),
            "initial_utility": mean(w.initial for w in rw),
            "utility_gain": mean(w.final - w.initial for w in rw),
            "probe_delta": mean(deltas) if deltas else 0.0,
            "probes_per_build": mean(len(w.probes) for w in rw),
            "probes_run": float(self.probes.probes_run),
            "builder_turns": mean(len(t.turns) for t in trajs),
            "builder_actions": mean(t.actions for t in trajs),
            "builder_errors": mean(t.errors for t in trajs),
            "valid_call_rate": valid_call_rate(trajs),
            "executed_call_rate": executed_call_rate(trajs),
            "failed_calls": mean(t.failed_calls for t in trajs),
            "stopped": mean(float(t.end == "done") for t in trajs),
            "generated_tokens": float(sum(len(x.response_ids) for t in trajs for x in t.turns)),
        }

    def rows(self, scored: Scored, step: int) -> list[dict[str, Any]]:
        """JSON-able rows of a step's builds with their per-turn rewards (`valid`: the turn parsed into calls with no
        call error, what `valid_call_rate` counts)."""
        rows = []
        for r, w in zip(scored.records, scored.details, strict=True):
            turns = [{"index": t.index, "text": t.text, "observation": t.observation[:500], "actions": t.actions,
                      "tokens": len(t.response_ids), "reward": w.turn_rewards[i],
                      "valid": bool(t.calls) and not t.errors, "failed_calls": len(t.errors) + t.failed_calls}
                     for i, t in enumerate(r.trajectory.turns)]
            rows.append({"step": step, "job": r.job_id, "corpus": r.corpus_id, "index": r.index,
                         "policy_version": r.policy_version, "end": r.trajectory.end, "initial_utility": w.initial,
                         "probe_utilities": {str(k): v for k, v in w.probes.items()}, "final_utility": w.final,
                         "turns": turns})
        return rows


def _probe_deltas(w: RolloutRewards) -> list[float]:
    out, prev = [], w.initial
    for t in sorted(w.probes):
        out.append(w.probes[t] - prev)
        prev = w.probes[t]
    return out


def sft_verified(end: str, gain: float, min_gain: float) -> bool:
    """Whether a teacher build is worth imitating: it gains at least `min_gain` and stopped, or it ran out of
    actions after a strictly positive gain (an index whose last file takes the last action)."""
    return gain >= min_gain and (end == "done" or (end == "budget" and gain > 0))


def teacher_samples(cfg: Any, session: RolloutSession, task: BuilderTask, corpora: Sequence[Corpus]) -> tuple[list, dict[str, Any]]:
    """The scripted builder's builds of `corpora` (`corpora.teacher_corpora`; tokenized by the policy's
    tokenizer), the verified ones' SFT samples, and what was kept."""
    jobs = [BuildJob(f"sft-{c.corpus_id}", c.corpus_id, c.docs, group_size=1, seed=cfg.seed, greedy=True,
                     teacher=cfg.sft.teacher, budget=cfg.sft.budget) for c in corpora]
    records = [r for recs in session.rollout(jobs).values() for r in recs]
    verified = [r.trajectory for r, w in zip(records, task.rewards(records), strict=True)
                if sft_verified(r.trajectory.end, w.final - w.initial, cfg.sft.min_gain)]
    samples = verified_samples(verified, lambda _t: True)
    return samples, {"teacher_builds": len(records), "verified": len(verified)}
