"""A fast check that GRPO learns: a reward the policy can learn, through the real rollout -> learner path.

The policy (any hf model; a tiny random one in the test suite) builds with
`BuilderRolloutWorker` under the tool-call grammar; a build of `turns` turns
gets reward 1 when the call of its last turn is the target tool (with one
turn: its first call) and 0 otherwise, as a terminal reward on its last turn
(so with several turns every turn shares the return, and a build that stops
early scores 0: credit must reach the earlier turns); multi-turn GRPO
advantages per group; one `Learner` update per step; the learner's published
weights are loaded into the worker before the next step. The mean reward
must rise; the same run with a learning rate of 0 is the control. It says
that the RL machinery learns, not that a builder gets better at building:
that is `benchmarks/learning_bench.py`.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass, field
from typing import Any

from librarian.cluster.builder_jobs import BuilderRolloutConfig, BuildJob
from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.learner import Learner, LearnerConfig, group_samples
from librarian.learner.config import LoraConfig, LossConfig
from librarian.rewards.construction import RewardConfig
from librarian.rl.samples import nonzero_group_fraction, valid_call_rate
from librarian.workspace import Document


@dataclass
class LearningCheck:
    """What to run: steps x groups x G builds of `turns` turns, the target tool, the learner's settings."""

    steps: int = 8
    turns: int = 1
    groups: int = 2
    group_size: int = 8
    target: str = "stop"
    lr: float = 3e-3
    max_new_tokens: int = 200
    seed: int = 0
    agg_mode: str = "seq-mean-token-mean"  # each build counts once, however long its arguments
    lora: dict = field(default_factory=lambda: {"enabled": False})


def target_reward(trajectory: Any, target: str, turn: int = 0) -> float:
    """1.0 when the build's first call (`turn` 0) or the first call of its turn `turn` is `target`, else 0.0."""
    turns = trajectory.turns if turn == 0 else trajectory.turns[turn:turn + 1]
    first = next((c for t in turns for c in t.calls), None)
    return float(first is not None and first["name"] == target)


def terminal_rewards(score: float, turns_with_tokens: int) -> list[float]:
    """`score` on the last of a build's `turns_with_tokens` turns, 0 on the others."""
    return [0.0] * (turns_with_tokens - 1) + [score] if turns_with_tokens else []


def run_learning_check(backend: Any, check: LearningCheck) -> dict[str, Any]:
    """Train `backend`'s model in place; returns `reward_per_step`, `valid_call_rate`, `nonzero_advantage_fraction`."""
    docs = [Document(f"d{i}", f"Fact {i}: person {i} lives in town {i % 3}.", path=f"facts/d{i}") for i in range(6)]
    spec = BuilderRolloutConfig(backend="hf", options={}, budget=check.turns, max_new_tokens=check.max_new_tokens,
                                constrained=True, content_executor="extractive")
    worker = BuilderRolloutWorker(spec, RewardConfig(max_probes=0), backend=backend)
    cfg = LearnerConfig(lr=check.lr, seed=check.seed, lora=LoraConfig(**check.lora), batch_size=check.groups,
                        group_size=check.group_size, loss=LossConfig(agg_mode=check.agg_mode))
    # the learner trains its own copy, as the learner actor does in its own process
    learner = Learner(copy.deepcopy(backend.model), cfg, pad_id=backend.pad_id, tokenizer=backend.tokenizer)
    worker.load(learner.publish_weights()[1])
    rewards, valid, nonzero, metrics = [], [], [], []
    for step in range(check.steps):
        jobs = [BuildJob(f"s{step}g{g}", "toy", docs, check.group_size, seed=check.seed * 7919 + step * 101 + g,
                         min_version=learner.version) for g in range(check.groups)]
        records = [r for job in jobs for r in worker.run(job)]
        trajs = [r.trajectory for r in records]
        scores = [target_reward(t, check.target, check.turns - 1) for t in trajs]
        rewards.append(statistics.fmean(scores))
        valid.append(valid_call_rate(trajs))
        turn_rewards = [terminal_rewards(s, sum(t.has_tokens for t in traj.turns))
                        for s, traj in zip(scores, trajs, strict=True)]
        samples, adv = group_samples(trajs, turn_rewards, [r.job_id for r in records], estimator="multi_turn_grpo",
                                     policy_versions=[r.policy_version for r in records])
        nonzero.append(nonzero_group_fraction(adv.tolist(), [r.job_id for r, rs in zip(records, turn_rewards,
                                                                                          strict=True) for _ in rs]))
        metrics.append(learner.step(samples))
        worker.load(learner.publish_weights()[1])
    return {"reward_per_step": rewards, "valid_call_rate": valid, "nonzero_advantage_fraction": nonzero,
            "learner": metrics}
