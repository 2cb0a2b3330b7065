"""Bootstrap CIs and unbiased pass@k."""

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.evaluation.learning_curves import (
    bench_args,
    ends_by_corpus,
    gain_over_control,
    plot_learning,
    pool_inputs,
    pool_report,
    reward_gain,
    rewards_by_step,
    seed_gains,
    shared_warm_start,
    unit_rewards_by_step,
)
from librarian.evaluation.metrics import (
    bootstrap_ci,
    cluster_bootstrap_ci,
    mean_pass_at_k,
    paired_bootstrap_ci,
    pass_at_k,
)
from librarian.evaluation.metrics.bootstrap import cluster_difference_ci, unpaired_difference_ci

values = st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None)
@given(values, st.integers(0, 10_000))
def test_ci_contains_point_and_is_deterministic(xs, seed):
    a = bootstrap_ci(xs, n_boot=300, seed=seed)
    b = bootstrap_ci(xs, n_boot=300, seed=seed)
    assert a == b
    assert a.low <= a.point <= a.high
    assert a.point == pytest.approx(float(np.mean(xs)))
    assert min(xs) - 1e-9 <= a.low and a.high <= max(xs) + 1e-9


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), st.floats(0.5, 50)), min_size=1, max_size=20), st.integers(0, 99))
def test_paired_ratio_ci(pairs, seed):
    x, y = [p[0] for p in pairs], [p[1] for p in pairs]
    ci = paired_bootstrap_ci(x, y, statistic="ratio_of_means", n_boot=300, seed=seed)
    assert ci.point == pytest.approx(sum(x) / sum(y))
    assert ci.low <= ci.point <= ci.high


def test_paired_resampling_keeps_pairs_together():
    x = list(range(1, 31))
    ci = paired_bootstrap_ci(x, x, statistic="mean_difference", n_boot=500)
    assert ci.low == ci.high == 0.0  # unpaired resampling would spread this out


def test_interval_narrows_with_more_data():
    rng = np.random.default_rng(3)
    small = bootstrap_ci(rng.normal(size=20), n_boot=1000, seed=1)
    big = bootstrap_ci(rng.normal(size=2000), n_boot=1000, seed=1)
    assert big.high - big.low < (small.high - small.low) / 3


def test_cluster_bootstrap_is_wider_for_correlated_clusters():
    # 10 clusters of 20 identical values: 10 effective observations, not 200
    x = np.repeat(np.arange(10.0), 20)
    clusters = np.repeat(np.arange(10), 20)
    naive = bootstrap_ci(x, n_boot=1000, seed=0)
    clustered = cluster_bootstrap_ci(x, clusters=clusters, n_boot=1000, seed=0)
    assert clustered.point == naive.point
    assert clustered.high - clustered.low > 2 * (naive.high - naive.low)


def test_callable_statistic_matches_named():
    x, y = [3, 4, 5, 9], [4, 4, 6, 10]
    named = bootstrap_ci(x, y, statistic="ratio_of_means", n_boot=200, seed=5, clusters=["a", "a", "b", "c"])
    func = bootstrap_ci(x, y, statistic=lambda a, b: a.mean() / b.mean(), n_boot=200, seed=5,
                        clusters=["a", "a", "b", "c"])
    assert named.point == pytest.approx(func.point)
    assert func.low <= func.point <= func.high


@pytest.mark.parametrize(("kwargs", "msg"), [
    ({"x": []}, "non-empty"),
    ({"x": [1, float("nan")]}, "NaN"),
    ({"x": [1, 2], "y": [1]}, "differ in length"),
    ({"x": [1, 2], "statistic": "median"}, "unknown statistic"),
    ({"x": [1, 2], "statistic": "ratio_of_means"}, "needs the paired sample"),
    ({"x": [1, 2], "y": [0, 0], "statistic": "ratio_of_means"}, "positive denominator"),
    ({"x": [1, 2], "clusters": ["a"]}, "labels"),
    ({"x": [1, 2], "level": 1.5}, "level"),
])
def test_bootstrap_errors(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        bootstrap_ci(**kwargs)


def exact_pass_at_k(n, c, k):
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@settings(deadline=None)
@given(st.integers(1, 40), st.data())
def test_pass_at_k_matches_exact_combinatorics(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    p = pass_at_k(n, c, k)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12)
    if k < n:
        assert pass_at_k(n, c, k + 1) >= p - 1e-12  # monotone in k


@settings(deadline=None)
@given(st.integers(1, 40), st.data())
def test_pass_at_1_is_the_success_rate(n, data):
    c = data.draw(st.integers(0, n))
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)
    assert pass_at_k(n, 0, n) == 0.0 and pass_at_k(n, n, 1) == 1.0


def test_pass_at_k_paper_setting_and_errors():
    # BRIGHT: four responses per question, pass@3
    assert pass_at_k(4, 1, 3) == pytest.approx(0.75)
    assert mean_pass_at_k([(4, 1), (4, 0)], 3) == pytest.approx(0.375)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="integer"):
        pass_at_k(4.0, 1, 1)  # type: ignore[arg-type]


def test_unpaired_difference_ci_covers_a_known_difference_and_detects_a_shift():
    rng = np.random.default_rng(0)
    covered = 0
    for k in range(200):
        x, y = rng.normal(0.5, 1.0, 40), rng.normal(0.0, 1.0, 30)
        ci = unpaired_difference_ci(x, y, n_boot=400, seed=k)
        covered += ci.low <= 0.5 <= ci.high
    assert 0.88 <= covered / 200 <= 0.99  # a 95% interval covers the true difference about 95% of the time
    same = unpaired_difference_ci([0.0, 1.0] * 20, [0.0, 1.0] * 20, seed=1)
    assert same.low < 0 < same.high
    shifted = unpaired_difference_ci([1.0] * 10 + [0.0] * 2, [0.0] * 10 + [1.0] * 2, seed=1)
    assert shifted.low > 0


def units(per_step: dict[int, list[float]], names: str = "abcd") -> dict[int, list[tuple[str, float]]]:
    """Per-step rewards labelled by unit (position k trains unit names[k] at every step)."""
    return {step: [(names[k % len(names)], r) for k, r in enumerate(rs)] for step, rs in per_step.items()}


def test_reward_gain_and_plot_from_trajectories(tmp_path):
    rows = [{"step": s, "corpus": "abcd"[k], "reward": float(s >= 3 and k < 3)} for s in range(6) for k in range(4)]
    (tmp_path / "trajectories.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert rewards_by_step(tmp_path, lambda row: row["reward"])[4] == [1.0, 1.0, 1.0, 0.0]
    per_step = unit_rewards_by_step(tmp_path, lambda row: row["reward"])
    assert list(per_step) == list(range(6)) and per_step[4][3] == ("d", 0.0)
    gain = reward_gain(per_step)
    assert gain["ends"] == 3 and abs(gain["gain"] - 0.75) < 1e-12 and gain["paired"] == 4
    assert reward_gain(units({0: [0.0], 1: [1.0]}))["ends"] == 1
    wide = reward_gain(per_step, ends=2)  # steps 0-1 (all 0) against 4-5 (three of four 1)
    assert wide["ends"] == 2 and abs(wide["gain"] - 0.75) < 1e-12
    assert reward_gain(per_step, ends=1)["gain"] == 0.75 and reward_gain(per_step, ends=6)["ends"] == 3
    plot_learning(tmp_path / "p.png", [0.1, 0.2], [0.1, 0.1], [1.0, 1.0], [0.5, 1.0])
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_reward_gain_pairs_units_and_resamples_them_whole():
    # four corpora at both ends: three gain 1 on every build, one loses 1: corpus by corpus the gain is +0.5, and
    # the interval over 4 corpora is far wider than one over their 32 builds would be
    first = {0: [0.0] * 8 + [1.0] * 8, 1: [0.0] * 8 + [1.0] * 8}
    last = {2: [1.0] * 8 + [0.0] * 8, 3: [1.0] * 8 + [0.0] * 8}
    per_step = {s: [("abcd"[k // 4], r) for k, r in enumerate(rs)] for s, rs in {**first, **last}.items()}
    gain = reward_gain(per_step, ends=2)
    assert gain["paired"] == 4 and gain["gain"] == 0.0  # c and d lose what a and b gain
    moved = {s: [("abcd"[k // 4], r) for k, r in enumerate(rs)] for s, rs in
             {0: [0.0] * 16, 1: [0.0] * 16, 2: [1.0] * 12 + [0.0] * 4, 3: [1.0] * 12 + [0.0] * 4}.items()}
    out = reward_gain(moved, ends=2)
    assert out["gain"] == 0.75 and out["ci"] == [0.25, 1.0]  # 4 units, three gaining 1, one 0: resampled whole
    fresh = {0: [("a", 0.0)] * 4, 1: [("b", 1.0)] * 4}  # no unit at both ends: two samples of units
    assert reward_gain(fresh, ends=1)["paired"] == 0 and reward_gain(fresh, ends=1)["gain"] == 1.0


def test_cluster_difference_ci_resamples_each_samples_clusters():
    x, xc = [1.0] * 20 + [0.0] * 20, ["a"] * 20 + ["b"] * 20
    y, yc = [0.0] * 40, ["c"] * 20 + ["d"] * 20
    clustered = cluster_difference_ci(x, xc, y, yc, seed=1)
    plain = unpaired_difference_ci(x, y, seed=1)
    assert clustered.point == plain.point == 0.5
    assert clustered.low == 0.0 and clustered.high == 1.0  # two clusters of x: all 0, half or all 1
    assert plain.high - plain.low < 0.4


def test_ends_by_corpus_gives_each_revisited_corpus_its_mean_at_both_ends(tmp_path):
    corpora = ["a", "b", "c", "a", "b"]  # a and b revisited: steps 0-1 and 3-4
    rows = [{"step": s, "corpus": c, "reward": float(s + k)} for s, c in enumerate(corpora) for k in range(2)]
    (tmp_path / "trajectories.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out = ends_by_corpus(tmp_path, lambda row: row["reward"], ends=2)
    assert out == {"a": {"first": 0.5, "last": 3.5}, "b": {"first": 1.5, "last": 4.5}}
    assert ends_by_corpus(tmp_path, lambda row: row["reward"], ends=1) == {}  # step 0 trains a, step 4 b
    assert set(ends_by_corpus(tmp_path, lambda row: row["reward"], ends=9)) == {"a", "b"}  # capped at 2 ends


def test_the_benchmarks_command_line_takes_the_gains_window(tmp_path):
    args, out, common = bench_args("x", "c.yaml", ["--out", str(tmp_path / "o"), "--ends", "6", "seed=2"])
    assert args.ends == 6 and out.is_dir() and common[-1] == "seed=2"
    assert bench_args("x", "c.yaml", ["--out", str(tmp_path / "o")])[0].ends == 3


def test_gain_over_control_pairs_builds_by_step():
    control = units({s: [float(s % 2), 0.0, 1.0, 0.0] for s in range(6)})  # corpus difficulty alternates by step
    better = units({s: ([1.0, 1.0, 1.0, 0.0] if s >= 1 else [float(s % 2), 0.0, 1.0, 0.0]) for s in range(6)})
    out = gain_over_control(better, control)
    assert out["steps"] == 5 and out["units"] == 4 and abs(out["gain"] - (15 - 8) / 20) < 1e-12
    same = gain_over_control(control, control)
    assert same["gain"] == 0.0 and same["ci"] == [0.0, 0.0]  # the control against itself: exactly nothing
    with pytest.raises(ValueError, match="no GRPO step"):
        gain_over_control(units({0: [1.0]}), units({0: [0.0]}))

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=4, max_size=4), min_size=2, max_size=6),
           st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=4, max_size=4), min_size=2, max_size=6))
    def antisymmetric(a, b):
        n = min(len(a), len(b))
        x, y = units(dict(enumerate(a[:n]))), units(dict(enumerate(b[:n])))
        assert abs(gain_over_control(x, y)["gain"] + gain_over_control(y, x)["gain"]) < 1e-12

    antisymmetric()


def test_seeds_are_the_unit_of_the_pooled_gain(tmp_path):
    control = units({s: [float(s % 2), 0.0, 1.0, 0.0] for s in range(6)})
    better = units({s: ([1.0, 1.0, 1.0, 0.0] if s >= 1 else [0.0] * 4) for s in range(6)})
    worse = units({s: ([0.0] * 4 if s >= 1 else [0.0] * 4) for s in range(6)})
    pooled = seed_gains([(better, control), (worse, control)])
    gains = [g["gain"] for g in pooled["per_seed"]]
    assert gains == [gain_over_control(better, control)["gain"], gain_over_control(worse, control)["gain"]]
    assert pooled["gain"] == pytest.approx(sum(gains) / 2) and pooled["seeds"] == 2 and pooled["df"] == 1
    assert pooled["ci"][0] < 0 < pooled["ci"][1]  # two seeds that disagree: the interval says so
    with pytest.raises(ValueError, match="2 or more"):
        seed_gains([(better, control)])

    def write(folder, which, per_step):
        (folder / which).mkdir(parents=True)
        rows = [{"step": s, "corpus": u, "reward": r} for s, rs in per_step.items() for u, r in rs]
        (folder / which / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    write(tmp_path / "a", "run", better)
    write(tmp_path / "a", "control", control)
    write(tmp_path / "b", "run", worse)
    write(tmp_path / "b", "control", control)
    result = pool_report(tmp_path, [tmp_path / "a", tmp_path / "b"], lambda row: row["reward"],
                         extra=lambda folders: {"folders_seen": len(folders)})
    assert json.loads((tmp_path / "pooled.json").read_text()) == result
    assert result["gain_over_control"] == pytest.approx(pooled["gain"]) and result["seeds"] == 2
    assert result["folders_seen"] == 2 and len(result["gain_over_control_per_seed"]) == 2
    write(tmp_path / "c", "run", better)  # its control never ran
    with pytest.raises(ValueError, match="c: no control trajectories"):
        pool_report(tmp_path, [tmp_path / "a", tmp_path / "c"], lambda row: row["reward"])
    with pytest.raises(ValueError, match="2 or more"):
        pool_report(tmp_path, [tmp_path / "a"], lambda row: row["reward"])


def test_shared_warm_start_points_the_control_at_the_runs_saved_sft_unless_one_is_named(tmp_path):
    assert shared_warm_start(tmp_path, []) == []  # the run saved none (SFT off, or not run yet)
    folder = tmp_path / "run" / "checkpoints" / "sft"
    folder.mkdir(parents=True)
    assert shared_warm_start(tmp_path, []) == []  # a folder without a committed checkpoint
    (folder / "learner.json").write_text("{}")
    assert shared_warm_start(tmp_path, ["steps=3"]) == [f"sft.init_from={folder}"]
    assert shared_warm_start(tmp_path, ["sft.init_from=/elsewhere"]) == []


def test_a_results_json_with_its_pool_inputs_stands_for_its_seed_folder(tmp_path):
    """A seed run in another session is pooled from its committed results.json: the same figures as its folder."""
    control = units({s: [0.0, 1.0, 0.0, 0.0] for s in range(4)})
    runs = {"a": units({s: [float(s >= 1), 1.0, 0.0, 1.0] for s in range(4)}),
            "b": units({s: [0.0, 1.0, float(s >= 2), 0.0] for s in range(4)})}
    for name, run in runs.items():
        for which, per_step in (("run", run), ("control", control)):
            (tmp_path / name / which).mkdir(parents=True)
            rows = [{"step": s, "corpus": u, "reward": r} for s, rs in per_step.items() for u, r in rs]
            (tmp_path / name / which / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = lambda row: row["reward"]  # noqa: E731
    committed = tmp_path / "seed_a.json"
    committed.write_text(json.dumps({"reward_gain": 0.5, "pool_inputs": pool_inputs(tmp_path / "a", reward)}))
    from_folders = pool_report(tmp_path / "p1", [tmp_path / "a", tmp_path / "b"], reward)
    from_file = pool_report(tmp_path / "p2", [committed, tmp_path / "b"], reward)
    assert from_file["gain_over_control_per_seed"][0]["gain"] == from_folders["gain_over_control_per_seed"][0]["gain"]
    assert from_file["gain_over_control_ci"] == from_folders["gain_over_control_ci"]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"reward_gain": 0.5}))
    with pytest.raises(ValueError, match="plain.json: not a benchmark results.json with pool_inputs"):
        pool_report(tmp_path / "p3", [plain, tmp_path / "b"], reward)
