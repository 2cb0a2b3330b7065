"""KBGym (paper 001 §IV-A): a contamination-free fictional universe with exact golds."""

from librarian.datasets.kbgym.build import SPLITS, KBGym, SplitSizes, build_kbgym
from librarian.datasets.kbgym.templates import ABSTAIN, CLASSES, TEMPLATES, TEMPLATES_BY_NAME

__all__ = ["ABSTAIN", "CLASSES", "SPLITS", "TEMPLATES", "TEMPLATES_BY_NAME", "KBGym", "SplitSizes", "build_kbgym"]
