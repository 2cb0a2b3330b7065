"""`librarian train_builder`'s structured config (OmegaConf dataclasses; YAML in configs/).

The sections every RL recipe has come from `librarian.rl.RLConfig`: `ray`
(session, placement group, learner resources), `rollout` (the builder
rollout workers' own spec, `BuilderRolloutConfig`), `learner`
(`LearnerConfig`: batch_size corpora x group_size builds per step),
`off_policy`, `sft`. The builder adds `data`, `probe` (the answerer probe
pool: a `ReaderSpec` plus its size), `reward` and `exam`. Each section is
checked when the config is built. The GPU preset `configs/cluster.yaml` fills
the same sections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from librarian.cluster.builder_jobs import BuilderRolloutConfig
from librarian.cluster.probe_pool import ProbeConfig
from librarian.rewards.construction import RewardConfig
from librarian.rl.config import RLConfig, SFTConfig


@dataclass
class BuilderDataConfig:
    """The KBGym universe, the builder corpora cut from it, and which questions they hold."""

    people: int = 60
    seed: int = 1
    split_sizes: dict = field(default_factory=dict)  # KBGym SplitSizes fields; empty: the pipeline's defaults
    train_corpora: int = 8
    exam_corpora: int = 2
    questions_per_corpus: int = 2
    docs_per_corpus: int = 10
    path_style: str = "id"  # id: facts/<id> | sentence: facts/<id> <sentence> (a builder sees it when listing)
    question_kinds: list = field(default_factory=list)  # templates or classes (QC9); empty: all
    max_support: int = 3
    min_support: int = 1  # questions needing fewer supporting facts are left out
    train_min_support: int = 0  # the training corpora's own minimum (0: `min_support`), e.g. questions a
    # flat store cannot answer, so that builds differ in reward
    train_seed: int | None = None  # the training corpora from another universe (every split of it);
    # None: the train split of `seed`'s universe. The exam always uses `seed`'s held-out splits.
    train_seeds: list = field(default_factory=list)  # the training corpora from these universes, one corpus of
    # each in turn (every split; questions suffixed @w<seed>); set train_corpora >= steps x batch_size for a run
    # that never revisits a corpus; empty: `train_seed` (or `seed`'s train split)
    sft_seeds: list = field(default_factory=list)  # further universes whose corpora (drawn as the training
    # corpora are) the SFT teacher builds after the training corpora (`sft.corpora` counts both), so the warm
    # start sees many keys while GRPO keeps its few revisited corpora; empty: the training corpora only
    train_order: list = field(default_factory=list)  # corpus ids (e.g. w6-0) in the order GRPO steps take them,
    # in rotation (a name may repeat); empty: as generated. Names must be among the `train_corpora` generated
    sft_from_train: bool = True  # false: the SFT teacher builds only `sft_seeds`' corpora, none of the training
    # corpora, so no corpus GRPO is measured on was memorised in the warm start
    headroom: bool = False  # draw every set from universes of its own and keep only corpora with room to learn:
    # training (train_seeds), SFT (sft_seeds), gate (val_seeds) and exam (exam_seeds) corpora the flat store misses
    # and the SFT teacher solves, checked corpus by corpus (`builder/corpus_sets.py`); plus a keep set
    exam_seeds: list = field(default_factory=list)  # with headroom: the exam's universes (every split)
    keep_corpora: int = 0  # with headroom: exam corpora of exam_seeds the flat store answers (does a build break them?)
    keep_min_support: int = 2  # the keep set's smallest group (members a question counts)
    keep_max_support: int = 5  # the keep set's largest group: at most the reader's retrieval depth
    val_seeds: list = field(default_factory=list)  # with headroom: the universes of the warm start's gate corpora
    val_corpora: int = 0  # with headroom: gate corpora (sft.min_success is measured on them)


@dataclass
class BuilderSFTConfig(SFTConfig):
    """Warm start: the scripted builder's verified builds (final U - initial U >= min_gain, and stopped or out
    of actions after a positive gain) on the first `corpora` training corpora."""

    corpora: int = 4
    min_gain: float = 0.0
    min_success: float = 0.0  # GRPO starts only when the warm start's sampled builds of the gate corpora
    # (data.val_corpora) succeed at least this often (0: no gate); the rate is printed and kept in results.json
    gate_samples: int = 4  # sampled builds of each gate corpus


@dataclass
class ExamConfig:
    """After training: flat store vs scripted builder vs trained builder on the held-out corpora."""

    enabled: bool = True
    scripted_budget: int = 12
    untrained: bool = False  # also examine the policy before SFT (`untrained_builder`)
    sft_only: bool = False  # also examine the policy after SFT, before GRPO (`sft_builder`)
    samples: int = 0  # k: sampled builds of each exam corpus by each policy, besides the greedy one (pass@1
    # estimated from k samples, as paper 000 reports BRIGHT); 0: greedy only


@dataclass
class TrainBuilderConfig(RLConfig):
    """What `librarian train_builder` runs; override any field as key=value."""

    rollout: BuilderRolloutConfig = field(default_factory=BuilderRolloutConfig)
    sft: BuilderSFTConfig = field(default_factory=BuilderSFTConfig)
    out_dir: str = "build/train_builder"  # folder the run writes: results.json, results.md, report.html, plots, trajectories, checkpoints, the local MLflow store
    data: BuilderDataConfig = field(default_factory=BuilderDataConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    exam: ExamConfig = field(default_factory=ExamConfig)
