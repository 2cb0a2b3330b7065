"""Intervals with the right units: corpus-clustered bootstraps, the between-seed t interval and the crossed
seeds x corpora model. Each test fails when its unit is ignored (builds resampled as if independent, seeds pooled
into one sample)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.evaluation.exam_rates import paired_difference_ci, rate_ci
from librarian.evaluation.metrics.bootstrap import bootstrap_ci, cluster_bootstrap_ci
from librarian.evaluation.metrics.seeds import crossed_interval, seed_interval


def corpus_effect_data(rng: np.random.Generator, corpora: int = 12, builds: int = 8, spread: float = 0.45):
    """0/1 outcomes whose success probability is set per corpus (a strong corpus effect)."""
    p = np.clip(0.5 + rng.uniform(-spread, spread, corpora), 0, 1)
    values = [float(rng.random() < p[c]) for c in range(corpora) for _ in range(builds)]
    labels = [f"c{c}" for c in range(corpora) for _ in range(builds)]
    return values, labels


def test_the_clustered_interval_is_wider_than_the_unclustered_one_under_a_corpus_effect():
    rng = np.random.default_rng(0)
    wider = 0
    for _ in range(20):
        values, labels = corpus_effect_data(rng)
        clustered = cluster_bootstrap_ci(values, labels, n_boot=1000, seed=1)
        plain = bootstrap_ci(values, n_boot=1000, seed=1)
        wider += (clustered.high - clustered.low) > (plain.high - plain.low)
    assert wider >= 18  # builds of one corpus are not independent: resampling corpora shows it


def test_the_clustered_paired_difference_covers_a_planted_null_at_about_the_nominal_rate():
    rng = np.random.default_rng(3)
    covered, runs = 0, 200
    for _ in range(runs):  # two policies with the same per-corpus success: the true difference is 0
        p = np.clip(0.5 + rng.uniform(-0.45, 0.45, 16), 0, 1)
        a = {f"c{c}": [float(rng.random() < p[c]) for _ in range(4)] for c in range(16)}
        b = {f"c{c}": [float(rng.random() < p[c]) for _ in range(4)] for c in range(16)}
        ci = paired_difference_ci(a, b, n_boot=400, seed=int(rng.integers(1 << 30)))["ci"]
        covered += ci[0] <= 0.0 <= ci[1]
    assert 0.88 <= covered / runs <= 0.99


def test_a_rate_counts_corpora_and_builds():
    r = rate_ci({"a": [1.0, 1.0], "b": [0.0, 0.0], "c": []}, n_boot=200)
    assert r["n"] == 2 and r["builds"] == 4 and r["mean"] == 0.5 and r["ci"][0] <= 0.5 <= r["ci"][1]
    assert rate_ci({}, n_boot=10)["mean"] is None


def test_the_seed_interval_is_the_t_interval_of_the_seed_means():
    ci = seed_interval([0.1, 0.2, 0.3])
    assert ci.mean == pytest.approx(0.2) and ci.df == 2
    assert ci.high - ci.mean == pytest.approx(4.302653 * 0.1 / np.sqrt(3), rel=1e-5)
    with pytest.raises(ValueError, match="2 or more"):
        seed_interval([0.5])


def _crossed(rng: np.random.Generator, seeds: int, corpora: int, mu: float, seed_sd: float, corpus_sd: float,
             err_sd: float) -> dict:
    a, b = rng.normal(0, seed_sd, seeds), rng.normal(0, corpus_sd, corpora)
    return {f"s{s}": {f"c{c}": mu + a[s] + b[c] + rng.normal(0, err_sd) for c in range(corpora)}
            for s in range(seeds)}


def test_the_crossed_interval_covers_mu_at_about_the_nominal_rate():
    rng = np.random.default_rng(5)
    covered, runs = 0, 300
    for _ in range(runs):
        ci = crossed_interval(_crossed(rng, 3, 32, 0.2, 0.05, 0.15, 0.1))
        covered += ci.low <= 0.2 <= ci.high
    assert 0.90 <= covered / runs <= 0.995


def test_the_crossed_interval_widens_with_the_seed_spread_that_pooling_would_hide():
    rng = np.random.default_rng(7)
    cells = _crossed(rng, 3, 32, 0.2, 0.3, 0.05, 0.05)  # seeds disagree strongly
    crossed = crossed_interval(cells)
    pooled = bootstrap_ci([v for s in cells.values() for v in s.values()], n_boot=1000)
    assert crossed.high - crossed.low > 3 * (pooled.high - pooled.low)
    assert crossed.df < 3


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=2, max_size=6))
def test_one_corpus_gives_the_seed_interval(values):
    cells = {f"s{i}": {"c": v} for i, v in enumerate(values)}
    assert crossed_interval(cells).as_list() == pytest.approx(seed_interval(values).as_list())


def test_an_unbalanced_table_is_refused():
    with pytest.raises(ValueError, match="same corpora"):
        crossed_interval({"s0": {"a": 1.0, "b": 0.0}, "s1": {"a": 1.0}})
