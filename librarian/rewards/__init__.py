"""Rewards: answer scorers (over `librarian.datasets.scoring`), the LLM judge (`llm_judge`), abstention,
paper 000's utility and telescoping construction rewards with the probe schedule, and paper 002's source recall.

The builder's reward path: `probe_exam` is the answerer probe (a reader's graded exam on a frozen snapshot:
`ExamRunner`, `run_local`; the Ray probe pool runs the same runner), `construction.ProbeService` turns a step's
snapshots into utilities through the run's probes (`construction.Probes`: the pool or `LocalProbes`; cached by
content hash) and `construction.step_rewards` into per-turn rewards. Pure functions otherwise, except the judge's cache."""

from librarian.rewards.abstention import AbstentionStats, abstains, abstention_score, abstention_stats
from librarian.rewards.llm_judge import DEFAULT_TEMPLATE, JudgeCache, JudgeError, LLMJudge, parse_verdict
from librarian.rewards.probes import ProbeSchedule, held_potentials, probe_rewards
from librarian.rewards.scoring import AnswerScore, ScoringError, answer_scores, hotpot_em_f1, score_answer
from librarian.rewards.source_recall import source_precision, source_recall
from librarian.rewards.utility import (
    RewardError,
    RolloutOutcome,
    Utility,
    UtilityWeights,
    dense_rewards,
    discounted_return,
    returns_to_go,
    sparse_reward,
    utility,
)

__all__ = [
    "DEFAULT_TEMPLATE", "AbstentionStats", "AnswerScore", "JudgeCache", "JudgeError", "LLMJudge", "ProbeSchedule",
    "RewardError", "RolloutOutcome", "ScoringError", "Utility", "UtilityWeights", "abstains", "abstention_score",
    "abstention_stats", "answer_scores", "dense_rewards", "discounted_return", "held_potentials", "hotpot_em_f1",
    "parse_verdict", "probe_rewards", "returns_to_go", "score_answer", "source_precision", "source_recall",
    "sparse_reward", "utility",
]
