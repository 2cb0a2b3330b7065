"""Loaders for six public benchmarks, from local files in their official formats (no downloads)."""

from librarian.datasets.loaders.memory import LOCOMO_FORMAT, LONGMEMEVAL_FORMAT, load_locomo, load_longmemeval
from librarian.datasets.loaders.reading import (
    HOTPOT_FORMAT,
    NARRATIVEQA_FORMAT,
    load_hotpotqa,
    load_narrativeqa,
)
from librarian.datasets.loaders.retrieval import (
    BRIGHT_FORMAT,
    BROWSECOMP_FORMAT,
    load_bright,
    load_browsecomp_plus,
)

# CLI name -> (loader, description of the expected input)
LOADERS = {
    "browsecomp_plus": (load_browsecomp_plus, BROWSECOMP_FORMAT),
    "bright": (load_bright, BRIGHT_FORMAT),
    "locomo": (load_locomo, LOCOMO_FORMAT),
    "longmemeval": (load_longmemeval, LONGMEMEVAL_FORMAT),
    "hotpotqa": (load_hotpotqa, HOTPOT_FORMAT),
    "narrativeqa": (load_narrativeqa, NARRATIVEQA_FORMAT),
}

__all__ = [
    "LOADERS",
    "load_bright",
    "load_browsecomp_plus",
    "load_hotpotqa",
    "load_locomo",
    "load_longmemeval",
    "load_narrativeqa",
]
