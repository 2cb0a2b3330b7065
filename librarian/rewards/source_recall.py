"""Paper 002's source-recall reward: R(tau) = |E_tau ∩ E*| / |E*|."""

from __future__ import annotations

from collections.abc import Iterable


def source_recall(collected: Iterable[str], gold: Iterable[str]) -> float:
    """Share of the gold supporting sources that the trajectory collected or cited.

    Duplicates count once; an empty gold set is an error (the reward is
    undefined: the question has no supporting sessions to find).
    """
    got, want = set(collected), set(gold)
    if not want:
        raise ValueError("source_recall needs a non-empty gold source set (E*)")
    return len(got & want) / len(want)


def source_precision(collected: Iterable[str], gold: Iterable[str]) -> float:
    """Share of the collected sources that are gold (0.0 when nothing was collected)."""
    got, want = set(collected), set(gold)
    return len(got & want) / len(got) if got else 0.0
