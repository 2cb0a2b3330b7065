"""`librarian train_researcher`'s structured config (OmegaConf dataclasses; YAML in configs/).

The sections every RL recipe has come from `librarian.rl.RLConfig`: `ray`,
`rollout` (the researcher rollout workers' own spec,
`ResearcherRolloutConfig`), `learner` (`LearnerConfig`: outcome GRPO over
`batch_size` questions x `group_size` trajectories per step, KL to the
reference), `off_policy`, `sft` (verified-trajectory SFT from the scripted
teacher). The researcher adds `data` (the Memory-Gym history and its
train/test questions), `memorizer`, `search` (the workers' search, also
their spec) and `eval` (`ArmsSettings`, the fields `ResearcherEvalConfig` checks). Every section
is checked when the config is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from librarian.cluster.researcher_jobs import ResearcherRolloutConfig, ResearchSearchConfig
from librarian.config import ConfigError
from librarian.evaluation.memory_eval import ArmsSettings, ResearcherEvalConfig
from librarian.learner.config import LearnerConfig, LossConfig
from librarian.models.scripted.researcher import ScriptedResearcher
from librarian.rl.config import RLConfig, SFTConfig


@dataclass
class ResearcherDataConfig:
    """A generated Memory-Gym history; its `train` questions feed SFT and GRPO, its `test` ones the evaluation."""

    speakers: int = 4
    sessions: int = 16
    seed: int = 1
    test_fraction: float = 0.3
    train_questions: int = 16  # at most this many train questions (0: all)
    test_questions: int = 8  # at most this many test questions (0: all)
    # GRPO's questions: the first N training questions, taken in turn (0: all). With N dividing `steps`, a run's
    # first and last steps hold the same questions, so its reward gain compares like with like.
    grpo_questions: int = 0


@dataclass
class MemorizerConfig:
    """How memos are written: `extractive` (deterministic) or `llm` (a backend by name and options)."""

    kind: str = "extractive"
    backend: str = "hf"
    options: dict = field(default_factory=lambda: {"model": "smollm2"})
    max_chars: int = 400


def _learner() -> LearnerConfig:
    return LearnerConfig(advantage="outcome_grpo", batch_size=2, group_size=4, grad_accum=8,
                         loss=LossConfig(kl_coef=0.01, kl_type="low_var_kl"))


@dataclass
class ResearcherSFTConfig(SFTConfig):
    """Verified-trajectory SFT: the scripted teacher's trajectories kept when the gold answer is in the
    finalized context and the exploration judge (`rule`, or `llm` with a backend) accepts them."""

    teacher: str = "jam_researcher"
    budget: int = 8  # teacher rounds
    batch_size: int = 2
    questions: int = 8  # train questions the teacher researches
    max_tokens: int = 3072  # a longer packed segment gives its first and its last max_tokens tokens (CPU memory); 0: none
    judge: str = "rule"  # rule | llm
    judge_backend: str = "hf"
    judge_options: dict = field(default_factory=lambda: {"model": "smollm2"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_tokens < 0 or self.max_tokens == 1:
            raise ConfigError(f"sft.max_tokens must be 0 (no limit) or >= 2, got {self.max_tokens}")
        if self.judge not in ("rule", "llm"):
            raise ConfigError(f"sft.judge must be one of rule, llm, got {self.judge!r}")


@dataclass
class ArmsEvalSection(ArmsSettings):
    """`librarian.evaluation.memory_eval.ArmsSettings` as a config section, checked by `to_eval_config`."""

    def to_eval_config(self) -> ResearcherEvalConfig:
        """The `ResearcherEvalConfig`; a bad value raises `ConfigError` naming it."""
        try:
            return ResearcherEvalConfig(**{f.name: getattr(self, f.name) for f in fields(ArmsSettings)})
        except ValueError as exc:
            raise ConfigError(f"eval: {exc}") from None


@dataclass
class ResearcherEvalSection(ArmsEvalSection):
    """After training: `evaluate_researcher` (the scripted researcher on every arm) and the trained policy."""

    embedder: str = "hashing"
    n_boot: int = 1000
    batch_size: int = 4
    enabled: bool = True
    trained: bool = True  # also research the test questions with the trained policy (greedy, no hints)
    trained_budget: int = 0  # rounds for the trained policy; 0: rollout.budget
    trained_questions: int = 0  # test questions the trained policy researches (0: all; an LLM on CPU is slow)


@dataclass
class TrainResearcherConfig(RLConfig):
    """What `librarian train_researcher` runs; override any field as key=value."""

    rollout: ResearcherRolloutConfig = field(default_factory=ResearcherRolloutConfig)
    learner: LearnerConfig = field(default_factory=_learner)
    sft: ResearcherSFTConfig = field(default_factory=ResearcherSFTConfig)
    out_dir: str = "build/train_researcher"  # (fields of `RLConfig` keep their place: `--help` lists them first)
    steps: int = 4
    data: ResearcherDataConfig = field(default_factory=ResearcherDataConfig)
    memorizer: MemorizerConfig = field(default_factory=MemorizerConfig)
    search: ResearchSearchConfig = field(default_factory=ResearchSearchConfig)
    eval: ResearcherEvalSection = field(default_factory=ResearcherEvalSection)

    def check(self) -> None:
        """`RLConfig.check`, then the researcher's own: the data, the SFT teacher's calls a round, eval."""
        super().check()
        d = self.data
        if d.sessions < 1 or d.speakers < 2:
            raise ConfigError(f"data.sessions must be >= 1 and data.speakers >= 2 (sessions are conversations), "
                              f"got {d.sessions}, {d.speakers}")
        if d.grpo_questions < 0:
            raise ConfigError(f"data.grpo_questions must be >= 0 (0: every training question), got {d.grpo_questions}")
        if not 0.0 < d.test_fraction < 1.0:
            raise ConfigError(f"data.test_fraction must be in (0, 1): the evaluation needs test questions, "
                              f"got {d.test_fraction}")
        if self.sft.enabled and self.sft.teacher == "jam_researcher":
            most, allowed = ScriptedResearcher.max_calls, self.rollout.max_calls_per_turn
            if allowed < most:
                raise ConfigError(f"rollout.max_calls_per_turn must be >= {most} with the jam_researcher SFT teacher "
                                  f"(it makes up to {most} calls a round; a round with more calls than allowed runs "
                                  f"none), got {allowed}")
        if self.memorizer.kind not in ("extractive", "llm"):
            raise ConfigError(f"memorizer.kind must be one of extractive, llm, got {self.memorizer.kind!r}")
        self.eval.to_eval_config()  # raises ConfigError naming a bad eval setting
