"""Bootstrap intervals mean what they say: the 95% interval covers a known mean in about 95% of repeated
experiments, and its width shrinks as 1/sqrt(n). (Asserting `low <= point <= high` alone cannot fail: the
interval is widened to reach the point.)"""

from __future__ import annotations

import numpy as np
import pytest

from librarian.evaluation.metrics.bootstrap import bootstrap_ci, paired_bootstrap_ci, unpaired_difference_ci

SIMULATIONS = 2000


def _coverage(draw, truth: float, interval) -> float:
    rng = np.random.default_rng(12345)
    hits = 0
    for i in range(SIMULATIONS):
        ci = interval(draw(rng), seed=i)
        hits += ci.low <= truth <= ci.high
    return hits / SIMULATIONS


@pytest.mark.parametrize(("name", "draw", "truth"), [
    ("normal", lambda rng: rng.normal(3.0, 2.0, size=150), 3.0),
    ("bernoulli", lambda rng: rng.binomial(1, 0.3, size=150).astype(float), 0.3),
    ("gamma", lambda rng: rng.gamma(4.0, 0.5, size=120), 2.0),
])
def test_the_95_interval_covers_a_known_mean_about_95_percent_of_the_time(name, draw, truth) -> None:
    coverage = _coverage(draw, truth, lambda x, seed: bootstrap_ci(x, n_boot=500, seed=seed))
    assert 0.93 <= coverage <= 0.97, f"{name}: {coverage:.3f}"


def test_a_paired_difference_interval_covers_the_true_difference() -> None:
    def draw(rng):
        base = rng.normal(0.0, 1.0, size=100)
        return base + rng.normal(0.5, 0.5, size=100), base  # paired: a shared per-item effect

    coverage = _coverage(draw, 0.5, lambda xy, seed: paired_bootstrap_ci(*xy, n_boot=500, seed=seed))
    assert 0.93 <= coverage <= 0.97, coverage


def test_an_unpaired_difference_interval_covers_the_true_difference() -> None:
    def draw(rng):
        return rng.normal(1.0, 1.0, size=90), rng.normal(0.6, 2.0, size=110)

    coverage = _coverage(draw, 0.4, lambda xy, seed: unpaired_difference_ci(*xy, n_boot=500, seed=seed))
    assert 0.93 <= coverage <= 0.97, coverage


def test_a_lower_level_gives_a_narrower_interval_with_lower_coverage() -> None:
    coverage = _coverage(lambda rng: rng.normal(0.0, 1.0, size=80), 0.0,
                         lambda x, seed: bootstrap_ci(x, n_boot=500, seed=seed, level=0.5))
    assert 0.45 <= coverage <= 0.55, coverage


def test_width_shrinks_as_one_over_sqrt_n() -> None:
    rng = np.random.default_rng(7)
    widths = {}
    for n in (100, 400, 1600):
        runs = [bootstrap_ci(rng.normal(0.0, 1.0, size=n), n_boot=1000, seed=s) for s in range(60)]
        widths[n] = float(np.mean([c.high - c.low for c in runs]))
    assert widths[100] / widths[400] == pytest.approx(2.0, rel=0.1)
    assert widths[400] / widths[1600] == pytest.approx(2.0, rel=0.1)
    assert widths[100] == pytest.approx(2 * 1.96 / np.sqrt(100), rel=0.1)  # the normal-theory 95% width
