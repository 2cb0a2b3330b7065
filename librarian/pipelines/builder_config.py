"""`librarian train_builder`'s structured config (OmegaConf dataclasses; YAML in configs/).

Sections follow the Ray topology: `ray` (session, placement group, learner
resources), `rollout` (builder rollout workers), `probe` (answerer probe
pool), `learner` (`librarian.learner.LearnerConfig`: batch_size corpora x
group_size builds per step), `reward`, `off_policy`, `sft`, `data`, `exam`.
The GPU preset `configs/cluster.yaml` fills the same sections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from librarian.cluster.faults import CrashPlan
from librarian.cluster.topology import RayConfig
from librarian.learner.config import LearnerConfig
from librarian.pipelines.builder_rewards import RewardConfig


@dataclass
class RolloutConfig:
    """Builder rollout workers: backend by name (`hf` now, `vllm` later), resources, episode settings."""

    backend: str = "hf"
    options: dict = field(default_factory=lambda: {"model": "smollm2"})
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_restarts: int = 4
    budget: int = 32  # builder actions per episode (horizon)
    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    hint_every: int = 0  # K_h: paper 000 has no hints (0: off); >0 is the hint-guided ablation; never at evaluation
    listing_lines: int = 40
    torch_threads: int = 0
    crash: CrashPlan = field(default_factory=CrashPlan)  # injected faults (tests)
    constrained: bool = True  # sample tool calls under the tools' grammar (compact layout; `models.constrained`)
    content_executor: str = "extractive"  # who writes file text the builder leaves out: extractive | none


@dataclass
class ProbeConfig:
    """The answerer probe pool (`librarian.cluster.probe_pool`): a reader spec and worker count."""

    role: str = "kbgym"
    backend: str = "scripted"
    options: dict = field(default_factory=lambda: {"policy": "kbgym_reader"})
    workers: int = 1  # 0: probe in the driver process (no Ray actor)
    gpus_per_worker: float = 0.0  # for GPU presets; the pool's workers take one CPU each
    budget: int = 8
    memory: int = 30
    max_new_tokens: int = 256
    chunk: int = 16
    max_restarts: int = 8


@dataclass
class DataConfig:
    """The KBGym universe and the builder corpora cut from it."""

    people: int = 60
    seed: int = 1
    train_corpora: int = 8
    exam_corpora: int = 2
    questions_per_corpus: int = 2
    docs_per_corpus: int = 10
    max_support: int = 3
    question_kinds: list = field(default_factory=list)  # templates or classes (QC9); empty: all
    min_support: int = 1  # questions needing fewer supporting facts are left out
    path_style: str = "id"  # id: facts/<id> | sentence: facts/<id> <sentence> (a builder sees it when listing)
    split_sizes: dict = field(default_factory=dict)  # KBGym SplitSizes fields; empty: the pipeline's defaults


@dataclass
class OffPolicyConfig:
    """Trajectories more than `max_staleness` updates behind the learner are dropped (`drop`) or kept."""

    max_staleness: int = 1
    stale: str = "drop"


@dataclass
class SFTConfig:
    """Warm start: the scripted builder's verified trajectories (final U - initial U >= min_gain, stopped)."""

    enabled: bool = True
    teacher: str = "librarian_builder"
    corpora: int = 4
    budget: int = 12
    epochs: int = 1
    batch_size: int = 4
    min_gain: float = 0.0
    lr: float = 0.0  # SFT's learning rate; 0: learner.lr (a control run sets learner.lr=0 and keeps SFT's)


@dataclass
class ExamConfig:
    """After training: flat store vs scripted builder vs trained builder on the held-out corpora."""

    enabled: bool = True
    scripted_budget: int = 12
    untrained: bool = False  # also examine the policy before SFT (`untrained_builder`)
    sft_only: bool = False  # also examine the policy after SFT, before GRPO (`sft_builder`)


@dataclass
class TrainBuilderConfig:
    """What `librarian train_builder` runs; override any field as key=value."""

    out_dir: str = "build/train_builder"
    steps: int = 10
    seed: int = 0
    resume: str = ""  # a checkpoint folder (out_dir/checkpoints/step_N) to continue from
    checkpoint_every: int = 1  # 0: no checkpoints
    experiment: str = "train_builder"
    tracking_uri: str = ""  # empty: a local MLflow store under out_dir
    save_trajectories: bool = True
    data: DataConfig = field(default_factory=DataConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    exam: ExamConfig = field(default_factory=ExamConfig)
