"""`librarian train_researcher`'s structured config (OmegaConf dataclasses; YAML in configs/).

Sections: `data` (the Memory-Gym history and its train/test questions),
`memorizer`, `search`, `ray` (the builder's `RayConfig`), `rollout` (the
researcher rollout workers), `learner` (`LearnerConfig`: outcome GRPO over
`batch_size` questions x `group_size` trajectories per step, KL to the
reference), `off_policy`, `sft` (verified-trajectory SFT from the scripted
teacher), `eval` (the fields of `ResearcherEvalConfig`) and tracking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from librarian.cluster.faults import CrashPlan
from librarian.cluster.topology import RayConfig
from librarian.learner.config import LearnerConfig, LossConfig
from librarian.pipelines.builder_config import OffPolicyConfig


@dataclass
class ResearcherDataConfig:
    """A generated Memory-Gym history; its `train` questions feed SFT and GRPO, its `test` ones the evaluation."""

    speakers: int = 4
    sessions: int = 16
    seed: int = 1
    test_fraction: float = 0.3
    train_questions: int = 16  # at most this many train questions (0: all)
    test_questions: int = 8  # at most this many test questions (0: all)


@dataclass
class MemorizerConfig:
    """How memos are written: `extractive` (deterministic) or `llm` (a backend by name and options)."""

    kind: str = "extractive"
    backend: str = "hf"
    options: dict = field(default_factory=lambda: {"model": "smollm2"})
    max_chars: int = 400


@dataclass
class ResearchSearchConfig:
    """The researcher's search during training: mode (hybrid = BM25 + dense) and the embedder."""

    mode: str = "hybrid"
    embedder: str = "hashing"  # minilm (bundled all-MiniLM-L6-v2) | hashing (fast, for CPU runs)
    snippet_chars: int = 160  # characters of a search hit's snippet (keeps CPU prompts short)


@dataclass
class ResearcherRolloutConfig:
    """Researcher rollout workers: backend by name, resources, rounds, sampling, hints (K_h)."""

    backend: str = "hf"
    options: dict = field(default_factory=lambda: {"model": "smollm2"})
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_restarts: int = 4
    budget: int = 4  # research rounds per episode (paper 002: 20)
    max_calls_per_turn: int = 4
    max_new_tokens: int = 96
    temperature: float = 1.0
    top_p: float = 1.0
    hint_every: int = 2  # K_h: a hint every K_h rounds of training rollouts (0: off); never at evaluation
    memory_window: int = 0  # 0: the whole conversation
    torch_threads: int = 0
    crash: CrashPlan = field(default_factory=CrashPlan)
    constrained: bool = True  # tool calls sampled under the tools' grammar (the teacher's are not)
    free_text: bool = True  # under the grammar, a short thought may precede the calls (think-explore-reflect)
    enum_paths: bool = True  # under the grammar, `path` and `sources` name the workspace's nodes (memo paths are long)


def _learner() -> LearnerConfig:
    return LearnerConfig(advantage="outcome_grpo", batch_size=2, group_size=4, grad_accum=8,
                         loss=LossConfig(kl_coef=0.01, kl_type="low_var_kl"))


@dataclass
class ResearcherSFTConfig:
    """Verified-trajectory SFT: the scripted teacher's trajectories kept when the gold answer is in the
    finalized context and the exploration judge (`rule`, or `llm` with a backend) accepts them."""

    enabled: bool = True
    teacher: str = "jam_researcher"
    questions: int = 8  # train questions the teacher researches
    budget: int = 8  # teacher rounds
    epochs: int = 1
    batch_size: int = 2
    lr: float = 0.0  # SFT's learning rate; 0: learner.lr (a control run sets learner.lr=0 and keeps SFT's)
    max_tokens: int = 3072  # longer packed segments keep their last max_tokens tokens (CPU memory); 0: no limit
    judge: str = "rule"  # rule | llm
    judge_backend: str = "hf"
    judge_options: dict = field(default_factory=lambda: {"model": "smollm2"})


@dataclass
class ArmsEvalSection:
    """`librarian.evaluation.memory_eval.ResearcherEvalConfig` as a config section (lists, not tuples)."""

    arms: list[str] = field(default_factory=lambda: ["hierarchical", "flat", "no_researcher", "no_bm25", "no_dense"])
    budget: int = 20
    max_calls_per_turn: int = 4
    embedder: str = "minilm"
    one_shot_k: int = 5
    n_boot: int = 2000
    seed: int = 0
    max_new_tokens: int = 512
    temperature: float = 0.0
    batch_size: int = 1

    def to_eval_config(self) -> Any:
        """The `ResearcherEvalConfig`; a bad value raises `ConfigError` naming it."""
        from librarian.config import ConfigError
        from librarian.evaluation.memory_eval import ResearcherEvalConfig

        try:
            return ResearcherEvalConfig(arms=tuple(self.arms), budget=self.budget,
                                        max_calls_per_turn=self.max_calls_per_turn, embedder=self.embedder,
                                        one_shot_k=self.one_shot_k, n_boot=self.n_boot, seed=self.seed,
                                        max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                        batch_size=self.batch_size)
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
class TrainResearcherConfig:
    """What `librarian train_researcher` runs; override any field as key=value."""

    out_dir: str = "build/train_researcher"
    steps: int = 4
    seed: int = 0
    checkpoint_every: int = 1  # 0: no checkpoints
    experiment: str = "train_researcher"
    tracking_uri: str = ""  # empty: a local MLflow store under out_dir
    save_trajectories: bool = True
    data: ResearcherDataConfig = field(default_factory=ResearcherDataConfig)
    memorizer: MemorizerConfig = field(default_factory=MemorizerConfig)
    search: ResearchSearchConfig = field(default_factory=ResearchSearchConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    rollout: ResearcherRolloutConfig = field(default_factory=ResearcherRolloutConfig)
    learner: LearnerConfig = field(default_factory=_learner)
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    sft: ResearcherSFTConfig = field(default_factory=ResearcherSFTConfig)
    eval: ResearcherEvalSection = field(default_factory=ResearcherEvalSection)
