"""Plots are written as non-empty PNG files; bad input raises a clear error and writes nothing."""

import pytest

from librarian.evaluation.metrics import AmortizationCurve, QueryResult, gradient_table, rho_ci
from librarian.evaluation.plots import (
    PlotError,
    RhoPoint,
    StepSeries,
    plot_amortization,
    plot_gradient,
    plot_learning_curves,
    plot_loss,
    plot_rho_vs_coverage,
    plot_step_panels,
    plot_structure,
)
from librarian.workspace import Add, Document, Workspace
from librarian.workspace.stats import structure_stats

PNG = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 5000


def test_learning_curves(tmp_path):
    out = plot_learning_curves({"reward": ([1, 2, 3, 4], [0.1, 0.3, 0.2, 0.5]),
                                "eval": ([2, 4], [0.2, 0.4])}, tmp_path / "sub" / "curves.png", smoothing=0.5)
    assert_png(out)
    with pytest.raises(PlotError, match="3 steps but 2 values"):
        plot_learning_curves({"r": ([1, 2, 3], [0.1, 0.2])}, tmp_path / "bad.png")
    with pytest.raises(PlotError, match="NaN"):
        plot_learning_curves({"r": ([1, 2], [0.1, float("nan")])}, tmp_path / "bad.png")
    with pytest.raises(PlotError, match="no series"):
        plot_learning_curves({}, tmp_path / "bad.png")
    with pytest.raises(PlotError, match=".png"):
        plot_learning_curves({"r": ([1], [1])}, tmp_path / "curves.pdf")
    assert not (tmp_path / "bad.png").exists()


def test_rho_vs_coverage(tmp_path):
    ci = rho_ci([6, 7, 5, 8], [9, 9, 8, 10], n_boot=200)
    out = plot_rho_vs_coverage([RhoPoint("flat", 0.0, 1.0), RhoPoint("graphrag", 1.0, 0.95),
                                RhoPoint("curated", 0.276, ci.point, ci)], tmp_path / "rho.png")
    assert_png(out)
    with pytest.raises(PlotError, match="coverage must be a share"):
        plot_rho_vs_coverage([RhoPoint("x", 27.6, 0.9)], tmp_path / "bad.png")


def test_amortization(tmp_path):
    curves = [AmortizationCurve("rl", 100_000, 2_000, 0.6), AmortizationCurve("base", 10_000, 5_000, 0.3)]
    assert_png(plot_amortization(curves, tmp_path / "amort.png"))
    with pytest.raises(PlotError, match="repeat"):
        plot_amortization([curves[0], curves[0]], tmp_path / "bad.png")
    with pytest.raises(PlotError, match="q_max"):
        plot_amortization(curves, tmp_path / "bad.png", q_max=1)


def test_gradient(tmp_path):
    groups = {"trained": ["a", "b"], "neither": ["c", "d"]}
    flat = {k: QueryResult(0.5, 10) for k in "abcd"}
    store = {"a": QueryResult(1, 5), "b": QueryResult(1, 6), "c": QueryResult(0, 10), "d": QueryResult(1, 11)}
    tables = {"curated": gradient_table(groups, store, flat, n_boot=100),
              "flat": gradient_table(groups, flat, flat, n_boot=100)}
    assert_png(plot_gradient(tables, tmp_path / "gradient.png"))
    with pytest.raises(PlotError, match="no rows"):
        plot_gradient({"x": []}, tmp_path / "bad.png")


def test_structure(tmp_path):
    ws = Workspace.from_documents([Document(id=f"d{i}", text=f"fact {i}") for i in range(6)])
    flat = structure_stats(ws)
    ws.apply(Add(text="index of facts", links=("d0", "d1", "d2")))
    out = plot_structure({"flat": flat, "curated": structure_stats(ws)}, tmp_path / "structure.png")
    assert_png(out)
    with pytest.raises(PlotError, match="expected StructureStats"):
        plot_structure({"flat": {"synthetic": 1}}, tmp_path / "bad.png")  # type: ignore[dict-item]


def test_step_panels_one_quantity_each_with_bands_and_marks(tmp_path):
    run = StepSeries([0, 1, 2], [0.1, 0.2, 0.3], [0.0, 0.1, 0.2], [0.2, 0.3, 0.4])
    out = plot_step_panels({"reward": {"run": run, "control": StepSeries([0, 1, 2], [0.1, 0.1, 0.1])},
                            "utility": {"run": run}}, tmp_path / "panels.png", marks={1: "no signal"})
    assert_png(out)
    with pytest.raises(PlotError, match="one low and one high per step"):
        plot_step_panels({"r": {"run": StepSeries([0, 1], [0.1, 0.2], [0.0], [0.3])}}, tmp_path / "bad.png")
    with pytest.raises(PlotError, match="no panels"):
        plot_step_panels({}, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_loss_plot_shades_steps_without_signal_and_is_skipped_without_a_loss(tmp_path):
    history = [{"step": 0.0, "loss": 0.0, "nonzero_advantage_fraction": 0.0},
               {"step": 1.0, "loss": 0.3, "nonzero_advantage_fraction": 0.5}]
    assert_png(plot_loss(history, tmp_path / "loss.png"))
    assert plot_loss([{"step": 0.0, "reward": 1.0}], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
