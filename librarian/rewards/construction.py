"""The builder's construction rewards (paper 000): probe utilities of frozen workspaces, per-turn rewards.

`ProbeService` sends each distinct snapshot (by the content hash it carries)
with its corpus's hidden questions to the run's probes (`Probes`: the probe
pool, or `probe_exam.LocalProbes`) once and turns the graded answers
into the utility U(F) (`librarian.rewards.utility`); a step's snapshots go
to the probes together (`step_rewards`). A rollout's per-turn rewards come from U(F_0),
the probes at turns k, 2k, ... and the final workspace
(`librarian.rewards.probe_rewards`), with the construction cost alpha x
actions per turn; `fold_tokenless` moves the reward of a turn without
generated tokens onto a turn the learner trains on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from librarian.config import ConfigError
from librarian.rewards.probes import probe_rewards
from librarian.rewards.utility import RolloutOutcome, UtilityWeights, sparse_reward, utility
from librarian.workspace.snapshot import Snapshot

CORRECTNESS = ("acc", "f1")
TERMINALS = ("score", "delta", "none")


def correctness(score: float, kind: str = "acc") -> float:
    """Acc or F1 of one graded answer from its headline score under the question's official metric.

    `acc` is paper 000's Acc in {0, 1}: 1 iff the answer is correct, i.e. it
    earns full credit under the question's metric (F1 == 1: for KBGym's
    `set_f1` the predicted set equals the gold set after SQuAD normalisation,
    for `squad_f1` the normalised answer matches a gold alternative token for
    token, for `judge` the verdict is yes), else 0. `f1` keeps the graded
    score (partial credit), an option beyond the paper.
    """
    if kind == "acc":
        return 1.0 if score >= 1.0 - 1e-9 else 0.0
    if kind == "f1":
        return float(score)
    raise ValueError(f"reward.correctness must be one of {', '.join(CORRECTNESS)}, got {kind!r}")


@dataclass(frozen=True, slots=True)
class ExamWeights(UtilityWeights):
    """The utility's weights plus how a graded answer counts as correct (`acc` | `f1`)."""

    correctness: str = "acc"


@dataclass
class RewardConfig:
    """Probe schedule, terminal reward, discount, costs and correctness (paper 000 Eq. 1-4, A.7).

    Defaults are paper 000's primary run: probes every 8 turns (at most 4),
    the terminal reward is the final workspace's downstream correctness
    (`score`: U(F_T) added to the last turn's reward, Algorithm 1), gamma 1,
    no construction, token or read cost, and Acc in {0, 1} as correctness.
    """

    every: int = 8  # k: probe every k builder turns
    max_probes: int = 4
    terminal: str = "score"  # score: + U(F_T) at the last turn | delta: telescopes to U(F_T) - U(F_0) - alpha sum cost | none
    gamma: float = 1.0
    alpha: float = 0.0  # construction cost per builder action
    lambda_tok: float = 0.0
    lambda_read: float = 0.0
    tok_scale: float = 1000.0
    read_scale: float = 10.0
    repeats: int = 1  # answering rollouts per question per probe
    correctness: str = "acc"  # acc: Acc in {0, 1} (paper 000) | f1: graded F1
    failed_call_cost: float = 0.0  # subtracted from a turn's reward for each of its calls that did not execute
    # (malformed, disallowed, or failed in the tool, e.g. a merge of a file that does not exist); paper 000 has
    # none (0: a failed call ties with `stop`); the learning presets charge one so that failing is never free

    def __post_init__(self) -> None:
        if self.correctness not in CORRECTNESS:
            raise ConfigError(f"reward.correctness must be one of {', '.join(CORRECTNESS)}, got {self.correctness!r}")
        if self.terminal not in TERMINALS:
            raise ConfigError(f"reward.terminal must be one of {', '.join(TERMINALS)}, got {self.terminal!r}")
        if not self.failed_call_cost >= 0:
            raise ConfigError(f"reward.failed_call_cost must be >= 0, got {self.failed_call_cost}")
        if self.every < 1 or self.max_probes < 0 or self.repeats < 1 or not 0 < self.gamma <= 1:
            raise ConfigError(f"reward needs every >= 1, max_probes >= 0, repeats >= 1 and gamma in (0, 1], got "
                              f"every={self.every}, max_probes={self.max_probes}, repeats={self.repeats}, "
                              f"gamma={self.gamma}")

    def weights(self) -> ExamWeights:
        return ExamWeights(self.lambda_tok, self.lambda_read, self.tok_scale, self.read_scale, self.correctness)


def exam_utility(results: Sequence[Any], weights: UtilityWeights, kind: str | None = None) -> float:
    """U(F) from graded answers (`ExamResult`s): Acc (or F1) as correctness, tokens and files read as costs.

    `kind` (acc | f1) defaults to the weights' `correctness` (`RewardConfig.weights()`), else acc.
    """
    kind = kind or getattr(weights, "correctness", "acc")
    outcomes = [RolloutOutcome(r.qid, correctness(r.f1, kind), float(r.tokens_read), float(r.files_read))
                for r in results]
    return utility(outcomes, weights).utility


class Probes(Protocol):
    """A run's probes, which probe many snapshots at once: the Ray `ProbePool` (one map over its workers) or
    `probe_exam.LocalProbes` (one after the other in this process), each snapshot's exam run by an `ExamRunner`."""

    def run_many(self, snapshots: Sequence[tuple[str, bytes, Sequence[Any]]], repeats: int = 1) -> list[list[Any]]:
        """Per (content hash, IPC bytes, questions), the graded answers in question order."""
        ...


class ProbeService:
    """Utilities of snapshots on their corpus's hidden questions, through the run's probes, cached by hash."""

    def __init__(self, runner: Probes, questions: dict[str, list], cfg: RewardConfig) -> None:
        """`runner`: the run's probes (`RLSession.probes`)."""
        self.runner = runner
        self.questions = questions
        self.cfg = cfg
        self.weights = cfg.weights()
        self.cache: dict[tuple[str, str], float] = {}
        self.probes_run = 0

    def utility(self, snapshot: Snapshot, corpus_id: str) -> float:
        """U(F) of the frozen workspace `snapshot` on `corpus_id`'s questions; probed once per content."""
        return self.utilities([(snapshot, corpus_id)])[0]

    def utilities(self, snapshots: Sequence[tuple[Snapshot, str]]) -> list[float]:
        """U(F) of each (snapshot, corpus id), keyed by the snapshot's content hash (never decoded here); the
        distinct ones not probed yet are probed together (one batch for the runner)."""
        keys = [(snap.key, corpus_id) for snap, corpus_id in snapshots]
        todo: dict[tuple[str, str], bytes] = {}
        for key, (snap, _) in zip(keys, snapshots, strict=True):
            if key not in self.cache:
                todo.setdefault(key, snap.data)
        batch = [(key, data, self.questions[corpus_id]) for (key, corpus_id), data in todo.items()]
        results = self.runner.run_many(batch, self.cfg.repeats) if batch else []
        for key, graded in zip(todo, results, strict=True):
            self.cache[key] = exam_utility(graded, self.weights)
            self.probes_run += 1
        return [self.cache[key] for key in keys]

    def question_utility(self, result: Any) -> float:
        """One graded answer's contribution to U (its correctness minus its reading costs)."""
        return exam_utility([result], self.weights)


def fold_tokenless(rewards: Sequence[float], has_tokens: Sequence[bool]) -> list[float]:
    """Rewards of the turns with tokens; a tokenless turn's reward goes to the nearest earlier tokened turn
    (the next one when none is earlier), so the sum is unchanged."""
    if len(rewards) != len(has_tokens):
        raise ValueError(f"{len(rewards)} rewards for {len(has_tokens)} turns")
    idx = [i for i, h in enumerate(has_tokens) if h]
    if not idx:
        return []
    out = {i: float(rewards[i]) for i in idx}
    for i, (r, h) in enumerate(zip(rewards, has_tokens, strict=True)):
        if not h:
            target = max((j for j in idx if j < i), default=min(idx))
            out[target] += float(r)
    return [out[i] for i in idx]


@dataclass
class RolloutRewards:
    """One rollout's per-turn rewards (all turns), U(F_0), the probe utilities and U(F_T)."""

    turn_rewards: list[float]
    initial: float
    probes: dict[int, float]
    final: float
    sparse: float


def rollout_rewards(record: Any, initial: float, probes: ProbeService, cfg: RewardConfig) -> RolloutRewards:
    """Per-turn rewards of one `RolloutRecord` from its probe snapshots and final workspace."""
    return step_rewards([record], {record.corpus_id: initial}, probes, cfg)[0]


def step_rewards(records: Sequence[Any], initial: dict[str, float], probes: ProbeService,
                 cfg: RewardConfig) -> list[RolloutRewards]:
    """Per-turn rewards of a step's `RolloutRecord`s (U(F_0) by corpus in `initial`); the step's distinct
    snapshots (probe turns and final workspaces) are probed in one batch."""
    snapshots = [(data, r.corpus_id) for r in records for data in (*r.probes.values(), r.final)]
    values = iter(probes.utilities(snapshots))
    out = []
    for r in records:
        at = {t: next(values) for t in r.probes}
        final = next(values)
        rewards = probe_rewards(len(r.trajectory.turns), initial[r.corpus_id], at, final, build_costs=r.build_costs,
                                alpha=cfg.alpha, gamma=cfg.gamma, terminal=cfg.terminal)  # type: ignore[arg-type]
        failed = failed_calls(r.trajectory)
        rewards = charge_failed_calls(rewards, failed, cfg.failed_call_cost)
        out.append(RolloutRewards(rewards, initial[r.corpus_id], at, final,
                                  sparse_reward(final, r.build_costs, cfg.alpha) - cfg.failed_call_cost * sum(failed)))
    return out


def failed_calls(trajectory: Any) -> list[int]:
    """Per turn, the calls that did not execute: malformed or disallowed (`errors`) and failed in the tool."""
    return [len(t.errors) + t.failed_calls for t in trajectory.turns]


def charge_failed_calls(rewards: Sequence[float], failed: Sequence[int], cost: float) -> list[float]:
    """Per-turn rewards less `cost` for each call of the turn that did not execute (a failed call is never free
    when `cost` > 0; a turn with none keeps its reward exactly)."""
    if len(rewards) != len(failed):
        raise ValueError(f"{len(rewards)} rewards for {len(failed)} turns")
    if cost < 0:
        raise ValueError(f"a failed call's cost must be >= 0, got {cost}")
    return [float(r) - cost * n if n else float(r) for r, n in zip(rewards, failed, strict=True)]
