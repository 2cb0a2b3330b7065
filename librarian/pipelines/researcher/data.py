"""The researcher's data: a generated Memory-Gym history, its questions, and the stores built from it.

`load_task` generates the history and caps its train and test questions;
`build_stores` builds the memorizer's hierarchical workspace (memos, group
READMEs, raw sessions) and the flat raw-history store, with their
construction figures; `memo_fn` is the memorizer's memo writer.
"""

from __future__ import annotations

from typing import Any

from librarian.config import ConfigError
from librarian.datasets.memorygym import MemoryGymConfig
from librarian.evaluation.memory_arms import build_store
from librarian.evaluation.memory_tasks import memorygym_task
from librarian.models import make_backend
from librarian.roles.memorizer import extractive_memo, llm_memo


def memo_fn(cfg: Any) -> Any:
    """The memorizer's memo writer: extractive, or an LLM backend's."""
    m = cfg.memorizer
    if m.kind == "extractive":
        return lambda doc: extractive_memo(doc, m.max_chars)

    return llm_memo(make_backend(m.backend, **dict(m.options)), m.max_chars)


def load_task(cfg: Any) -> tuple[Any, list, list]:
    """The Memory-Gym history and its train and test questions (with gold sessions), capped by config."""
    d = cfg.data
    task = memorygym_task(MemoryGymConfig(speakers=d.speakers, sessions=d.sessions, seed=d.seed,
                                          test_fraction=d.test_fraction))
    train = [q for q in task.questions if q.split == "train" and q.support]
    test = [q for q in task.questions if q.split == "test" and q.support]
    train, test = train[: d.train_questions or None], test[: d.test_questions or None]
    if not train or not test:
        raise ConfigError(f"the Memory-Gym history (speakers={d.speakers}, sessions={d.sessions}, seed={d.seed}) "
                          f"has {len(train)} train and {len(test)} test questions; raise data.sessions or change "
                          "data.test_fraction")
    return task, train, test


def build_stores(cfg: Any, task: Any) -> tuple[Any, dict[str, float]]:
    """The hierarchical store (its workspace is what the researcher explores) and the construction figures of
    both stores."""
    hier = build_store(task.sessions, "hierarchical", memo_fn(cfg))
    flat = build_store(task.sessions, "flat")
    return hier, {"hierarchical_build_s": hier.build_s, "flat_build_s": flat.build_s,
                  "hierarchical_nodes": len(hier.workspace), "flat_nodes": len(flat.workspace)}
