"""rho, the key-coverage gradient, break-even, amortization and reading costs."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.evaluation.metrics import (
    AmortizationCurve,
    QueryCost,
    QueryResult,
    break_even,
    cheaper_from,
    crossover,
    gain_per_coverage_point,
    gradient_table,
    query_cost_from_summary,
    reading_stats,
    rho,
    rho_ci,
)

actions = st.lists(st.integers(1, 15), min_size=1, max_size=30)


@settings(deadline=None)
@given(actions)
def test_rho_is_one_on_identical_actions(xs):
    assert rho(xs, xs) == 1.0
    ci = rho_ci(xs, xs, n_boot=200)
    assert ci.point == ci.low == ci.high == 1.0 and not ci.excludes(1.0)


@settings(deadline=None)
@given(actions, st.integers(2, 5))
def test_rho_scales(xs, factor):
    assert rho([x * factor for x in xs], xs) == pytest.approx(factor)


def test_rho_by_question_id_and_errors():
    assert rho({"a": 5, "b": 7}, {"b": 8, "a": 4}) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="question ids differ"):
        rho({"a": 5}, {"b": 4})
    with pytest.raises(ValueError, match="both as"):
        rho([1], {"a": 1})
    with pytest.raises(ValueError, match="no actions"):
        rho([1, 2], [0, 0])
    with pytest.raises(ValueError, match="3 store values"):
        rho([1, 2, 3], [1, 2])


def test_clear_saving_is_significant():
    store, flat = [6] * 15 + [7] * 15, [9] * 15 + [10] * 15
    ci = rho_ci(store, flat, n_boot=500)
    assert ci.point == pytest.approx(195 / 285) and ci.excludes(1.0)


def test_gain_per_coverage_point_paper_001_arithmetic():
    # paper 001: flat 9.8 actions / F1 0.725; ours 8.7 / 0.817 at 27.6% coverage
    g = gain_per_coverage_point([8.7], [9.8], [0.817], [0.725], 0.276)
    assert g.actions_per_point == pytest.approx(0.0399, abs=1e-4)
    assert g.f1_per_point == pytest.approx(0.0033, abs=1e-4)
    assert gain_per_coverage_point([1], [2], [0.5], [0.5], 0.0).actions_per_point is None


def test_gradient_table():
    groups = {"trained": ["t1", "t2"], "neither": ["n1", "n2"]}
    store = {"t1": QueryResult(1.0, 5), "t2": QueryResult(0.5, 6), "n1": QueryResult(0.0, 10),
             "n2": QueryResult(1.0, 9)}
    flat = {"t1": QueryResult(0.5, 10), "t2": QueryResult(0.5, 10), "n1": QueryResult(0.0, 10),
            "n2": QueryResult(1.0, 9)}
    rows = gradient_table(groups, store, flat, n_boot=200)
    assert [r.group for r in rows] == ["trained", "neither", "all"]
    trained, neither, pooled = rows
    assert trained.rho.point == pytest.approx(11 / 20) and trained.f1 == 0.75 and trained.f1_flat == 0.5
    assert neither.rho.point == 1.0 and not neither.significant
    assert pooled.n == 4 and pooled.rho.point == pytest.approx(30 / 39)
    with pytest.raises(ValueError, match="no result for questions"):
        gradient_table({"one": ["zz"]}, store, flat)


def test_break_even_sign_conventions():
    # paper 001: 18.8M tokens, 13.7k -> 8.2k tokens per question ~ 3,400 questions
    assert break_even(18.8e6, 13_700, 8_200) == pytest.approx(3418, abs=1)
    assert break_even(1000, 10, 10) is None  # no saving: never pays back
    assert break_even(1000, 10, 12) is None  # costs more per question
    assert break_even(0, 10, 5) == 0.0
    with pytest.raises(ValueError, match="c_train"):
        break_even(-1, 10, 5)
    with pytest.raises(ValueError, match="finite"):
        break_even(math.inf, 10, 5)


@settings(deadline=None)
@given(st.floats(0, 1e6), st.floats(0, 1e4), st.floats(0, 1e4))
def test_break_even_repays_exactly(c_train, c0, ct):
    n = break_even(c_train, c0, ct)
    if c0 <= ct or not math.isfinite(c_train / (c0 - ct)):
        assert n is None
    else:
        assert n >= 0 and n * (c0 - ct) == pytest.approx(c_train, rel=1e-9, abs=1e-6)


curves = st.builds(AmortizationCurve, st.just("m"), st.integers(0, 10**6).map(float), st.integers(0, 10**4).map(float),
                   st.sampled_from([0.1, 0.25, 0.5, 0.8, 1.0]))


@settings(deadline=None)
@given(curves, curves, st.booleans())
def test_crossover_is_where_the_curves_meet(a, b, normalized):
    q = crossover(a, b, normalized)
    cost = (lambda c, x: c.tokens_per_correct(x)) if normalized else (lambda c, x: c.tokens_per_query(x))
    if q is None:
        # no positive crossing: the sign of the difference never changes on q > 0
        diffs = [cost(a, x) - cost(b, x) for x in (1e-3, 0.1, 1, 10, 1e3, 1e5, 1e8)]
        assert all(d >= -1e-6 for d in diffs) or all(d <= 1e-6 for d in diffs)
    else:
        assert q > 0
        assert cost(a, q) == pytest.approx(cost(b, q), rel=1e-6)


def test_amortization_paper_shape():
    rl = AmortizationCurve("rl", build=100_000, answer=2_000, accuracy=0.6)
    base = AmortizationCurve("base", build=10_000, answer=5_000, accuracy=0.3)
    assert rl.tokens_per_query(10) == pytest.approx(12_000)
    assert rl.tokens_per_correct(10) == pytest.approx(20_000)
    assert crossover(rl, base) == pytest.approx(30.0)
    assert cheaper_from(rl, base) == 31 and cheaper_from(base, rl) is None
    q = crossover(rl, base, normalized=True)
    assert rl.tokens_per_correct(q) == pytest.approx(base.tokens_per_correct(q))
    assert cheaper_from(AmortizationCurve("x", 1, 1), AmortizationCurve("y", 2, 2)) == 1
    fitted = AmortizationCurve.from_logs("m", [100, 300], [10, 20, 30], [1, 0, 1])
    assert (fitted.build, fitted.answer, fitted.accuracy) == (200, 20, pytest.approx(2 / 3))
    with pytest.raises(ValueError, match="accuracy"):
        AmortizationCurve("never", 1, 1, accuracy=0.0)
    with pytest.raises(ValueError, match="q must be > 0"):
        rl.tokens_per_query(0)


def test_reading_stats_from_summaries():
    summaries = [{"est_tokens_read": 100, "raw_touched": 2, "synthetic_touched": 1, "actions": 4},
                 {"est_tokens_read": 300, "raw_touched": 0, "synthetic_touched": 3, "actions": 6}]
    stats = reading_stats([query_cost_from_summary(s) for s in summaries])
    assert (stats.tokens, stats.files, stats.synthetic_files, stats.raw_files, stats.actions) == (200, 3, 2, 1, 5)
    assert stats.tokens_se == pytest.approx(100)
    with pytest.raises(ValueError, match="lacks"):
        query_cost_from_summary({"actions": 1})
    with pytest.raises(ValueError, match=">= 0"):
        reading_stats([QueryCost(tokens=-1, files=0)])
