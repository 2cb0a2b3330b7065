"""Metrics as pure functions over numbers, dataclasses and workspaces (docs/rewards-and-metrics.md)."""

from librarian.evaluation.metrics.amortization import AmortizationCurve, cheaper_from, crossover
from librarian.evaluation.metrics.bootstrap import CI, bootstrap_ci, cluster_bootstrap_ci, paired_bootstrap_ci
from librarian.evaluation.metrics.breakeven import break_even
from librarian.evaluation.metrics.coverage import CoverageReadings, coverage_readings, question_coverage
from librarian.evaluation.metrics.gradient import GradientRow, QueryResult, gradient_table
from librarian.evaluation.metrics.index_quality import (
    AuthoredIndex,
    IndexQuality,
    KindQuality,
    index_quality,
    verified_coverage,
)
from librarian.evaluation.metrics.passk import mean_pass_at_k, pass_at_k
from librarian.evaluation.metrics.reading import (
    QueryCost,
    ReadingStats,
    query_cost_from_summary,
    reading_stats,
)
from librarian.evaluation.metrics.rho import CoverageGain, gain_per_coverage_point, rho, rho_ci
from librarian.evaluation.metrics.structure import headline, structure_table

__all__ = [
    "CI", "AmortizationCurve", "CoverageGain", "CoverageReadings", "GradientRow", "IndexQuality", "AuthoredIndex",
    "KindQuality", "QueryCost", "QueryResult", "ReadingStats", "bootstrap_ci", "break_even", "cheaper_from",
    "cluster_bootstrap_ci", "coverage_readings", "crossover", "gain_per_coverage_point", "gradient_table",
    "headline", "index_quality", "mean_pass_at_k", "paired_bootstrap_ci", "pass_at_k", "query_cost_from_summary",
    "question_coverage", "reading_stats", "rho", "rho_ci", "structure_table", "verified_coverage",
]
