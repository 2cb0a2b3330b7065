"""Pooling the builder's exam over seeds from benchmark folders or from the results.json each seed committed."""

from __future__ import annotations

import json

import pytest

from librarian.evaluation.plots import PlotError, plot_pooled_exam
from librarian.evaluation.transfer import pooled_fields, seed_exam

STORES = ("flat", "untrained_builder", "sft_builder", "trained_builder", "scripted_builder")


def exam(trained: list[list[float]]) -> dict:
    """Four hard corpora: flat and untrained never solve, SFT solves one sample in four, trained as given."""
    corpora = {}
    for i, samples in enumerate(trained):
        entry = {s: {"set": "hard", "utility": 0.0, "sampled": [0.0] * 4} for s in STORES}
        entry["sft_builder"]["sampled"] = [1.0, 0.0, 0.0, 0.0]
        entry["trained_builder"] = {"set": "hard", "utility": samples[0], "sampled": samples}
        corpora[f"c{i}"] = entry
    return {"corpora": corpora, "rates": {"hard_corpora": len(corpora)}}


def test_a_committed_results_json_pools_as_its_folder_does(tmp_path):
    first = exam([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0] * 4, [1.0] * 4])
    second = exam([[0.0] * 4, [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0] * 4])
    folders = []
    for name, e in (("s1", first), ("s2", second)):
        (tmp_path / name / "run").mkdir(parents=True)
        (tmp_path / name / "run" / "results.json").write_text(json.dumps({"exam": e}))
        folders.append(tmp_path / name)
    committed = tmp_path / "seed1.json"
    committed.write_text(json.dumps({"exam": first, "reward_gain": 0.1}))
    assert seed_exam(committed) == seed_exam(folders[0]) == first
    from_folders, from_file = pooled_fields(folders), pooled_fields([committed, folders[1]])
    for name in ("exam_trained_minus_untrained", "exam_trained_minus_untrained_ci", "exam_trained_minus_sft_only",
                 "exam_trained_minus_untrained_per_seed", "exam_solve_rate_trained_sampled"):
        assert from_file[name] == from_folders[name]
    assert from_file["exam_trained_minus_untrained_per_seed"] == [pytest.approx(0.4375), pytest.approx(0.1875)]
    assert from_file["crossed_model"] is True


def test_a_seed_without_an_exam_pools_nothing(tmp_path):
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"reward_gain": 0.0}))
    assert pooled_fields([bare, bare]) == {}


def test_the_pooled_exam_is_plotted_seed_by_seed(tmp_path):
    seeds = []
    for name, trained in (("s1", [[1.0] * 4, [0.0] * 4]), ("s2", [[1.0, 0.0, 0.0, 0.0], [1.0] * 4])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"exam": exam(trained)}))
        seeds.append(path)
    pooled = pooled_fields(seeds)
    assert pooled["exam_solve_rate_trained_sampled"] == pytest.approx((0.5 + 0.625) / 2)
    png = plot_pooled_exam(pooled, tmp_path / "pooled.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    with pytest.raises(PlotError, match="no seeds"):
        plot_pooled_exam({}, tmp_path / "empty.png")
