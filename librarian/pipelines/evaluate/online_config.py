"""The config of `librarian evaluate_online` (prequential evaluation of online curation)."""

from __future__ import annotations

from dataclasses import dataclass, field

from librarian.config import ConfigError
from librarian.datasets.records import DatasetError
from librarian.datasets.source import SPLITS
from librarian.online.curation import CurationConfig
from librarian.online.policy import PolicyConfig
from librarian.pipelines import scaffold
from librarian.search.factory import SearchConfig

FEEDBACK = ("gold", "verdict", "none")


@dataclass
class EvaluateOnlineConfig(scaffold.DataRunConfig):
    """What `librarian evaluate_online` runs; override any field as key=value."""

    out_dir: str = "build/evaluate_online"
    stream_splits: list = field(default_factory=lambda: ["train", "test_out"])  # the traffic, in this order
    stream_questions: int = -1  # -1: every question of the stream splits
    shuffle: bool = True  # a seeded shuffle of the stream (traffic mixes question classes)
    heldout_split: str = "test_in"  # never in the stream: rho_heldout is measured on it at the end
    heldout_questions: int = -1  # -1: every question of the held-out split (classes in turn when fewer)
    window: int = 25  # questions per window of results.json
    curate_every: int = 5  # questions answered (and logged) between curation rounds
    feedback: str = "gold"  # what comes back per question: gold | verdict (correct/incorrect) | none
    reader: PolicyConfig = field(default_factory=PolicyConfig)  # scripted: kbgym_reader (phantom_reader) unless named
    reader_budget: int = 15  # M: the reader's actions per question
    reader_memory: int = 30  # K: last k action-result pairs the reader sees (-1: all)
    curation: CurationConfig = field(default_factory=CurationConfig)
    search: SearchConfig = field(default_factory=lambda: SearchConfig(embedder="none"))
    search_mode: str = "bm25"
    delta: float = 0.03  # non-inferiority margin on F1 (the figures' test)
    batch: int = 32  # reader episodes generated together
    n_boot: int = 2000
    experiment: str = ""  # MLflow experiment ('': $MLFLOW_EXPERIMENT_NAME, else evaluate_online)
    tracking_uri: str = ""  # MLflow store ('': $MLFLOW_TRACKING_URI, else a local store under out_dir)


def check(cfg: EvaluateOnlineConfig) -> None:
    """Refuse a config that cannot run, naming the key."""
    bad = [s for s in [*cfg.stream_splits, cfg.heldout_split] if s not in SPLITS]
    if bad:
        raise ConfigError(f"stream_splits / heldout_split: unknown split(s) {bad}; choose from {', '.join(SPLITS)}")
    if not cfg.stream_splits:
        raise ConfigError("stream_splits is empty: the stream needs at least one split")
    if cfg.heldout_split in cfg.stream_splits:
        raise ConfigError(f"heldout_split {cfg.heldout_split!r} is also in stream_splits; the held-out split must "
                          "never be seen in the stream")
    for name in ("window", "curate_every", "reader_budget", "batch", "n_boot"):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.feedback not in FEEDBACK:
        raise ConfigError(f"feedback must be one of {', '.join(FEEDBACK)}, got {cfg.feedback!r}")
    if cfg.reader.backend == "reader":
        raise ConfigError("reader.backend cannot be 'reader'; name a backend (scripted, hf, openai)")
    cfg.curation.check()
    try:
        cfg.data.check()
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
