"""The builder run's report, rendered from a synthetic results.json: it opens with what the run shows (a saturated
exam, a builder that built nothing), carries the paired differences with CIs, and leaves empty columns out."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import librarian.evaluation.plots as plots
import librarian.pipelines.builder.curves as curves
from librarian.pipelines.builder.report import write_outputs

from ..evaluation.builder_results import builder_results, write_trajectories


class _Tracker:
    run_id, tracking_uri = "run", "file:///mlflow"

    def __init__(self) -> None:
        self.logged: list[str] = []

    def log_file(self, path, folder=None) -> None:
        self.logged.append(str(path))

    def artifact_uri(self) -> str:
        return "artifacts"


class _Findings(HTMLParser):
    """The text of each <li> of the findings list, and the headings in order."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self.headings: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("li", "h2"):
            self._in = tag
            (self.items if tag == "li" else self.headings).append("")

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "li":
            self.items[-1] += data
        elif self._in == "h2":
            self.headings[-1] += data


def _render(tmp_path, **kw):
    out = tmp_path / "run"
    out.mkdir()
    write_trajectories(out)
    results = builder_results(**kw)
    write_outputs(out, results, _Tracker())
    page = _Findings()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    return out, page


def test_report_of_a_saturated_exam_and_a_builder_that_built_nothing(tmp_path, capsys) -> None:
    out, page = _render(tmp_path, flat_f1=1.0, trained_same_as_flat=True)
    assert page.headings[0] == "What this run shows"
    assert page.items[0] == "This run cannot show a trained builder that helps: the trained builder built nothing."
    assert any(i.startswith("The exam is saturated: the flat store already answers every exam question") for i in page.items)
    assert any(i.startswith("The trained builder built nothing: on all 2 exam corpora its store is the flat store")
               for i in page.items)
    assert "Paired differences of exam utility" in page.headings
    md = (out / "results.md").read_text(encoding="utf-8")
    assert md.splitlines()[:3] == ["## What this run shows", "",
                                   "- This run cannot show a trained builder that helps: the trained builder built "
                                   "nothing."]
    assert "| the scripted builder - the flat store | 0.020 | [0.010, 0.030] | a higher |" in md
    assert "| the trained builder - the flat store | 0.000 | [0.000, 0.000] | 0 by construction" in md
    assert "F1 - flat" not in md.split("## Exam")[1].splitlines()[2]  # 0 for every store: left out, and said so
    assert "Columns left out (0 for every store: F1 - flat)." in md
    assert "| trained_builder |" in md and "2 of 2 |" in md
    results = json.loads((out / "results.json").read_text())
    assert results["findings"] == page.items
    assert capsys.readouterr().out.lstrip().startswith("## What this run shows")


def test_report_of_a_builder_that_helped_names_the_difference(tmp_path) -> None:
    _, page = _render(tmp_path, flat_f1=0.5, trained_same_as_flat=False, trained_minus_flat=(0.1, 0.05, 0.15))
    assert re.match(r"The trained builder's stores raise exam utility over the flat store: trained - flat exam "
                    r"utility \+0\.100 \(95% CI \[\+0\.050, \+0\.150\]\)", page.items[0])
    assert not any("saturated" in i or "built nothing" in i for i in page.items)


def test_learning_curves_have_one_quantity_per_panel_and_mark_steps_without_signal(tmp_path, monkeypatch) -> None:
    seen = []
    real = plots.plot_step_panels

    def spy(panels, path, **kw):
        seen.append((path.name, {k: dict(v) for k, v in panels.items()}, kw))
        return real(panels, path, **kw)

    monkeypatch.setattr(curves, "plot_step_panels", spy)
    monkeypatch.setattr(plots, "plot_step_panels", spy)
    out, _ = _render(tmp_path, no_signal_steps=(0,))
    (name, panels, _), (loss_name, _, loss_kw) = seen
    assert name == "learning_curve.png" and len(panels) == 3  # reward, utility gain, final utility: a panel each
    gain = panels["utility gain U(F_T) - U(F_0)"]["run"]
    assert list(gain.steps) == [0, 1, 2] and abs(gain.mean[0] - 0.015) < 1e-9 and gain.low[0] < 0.015 < gain.high[0]
    assert loss_name == "loss.png" and loss_kw["marks"] == {0: "no signal: loss 0"}
    assert (out / "learning_curve.png").stat().st_size > 0 and (out / "loss.png").stat().st_size > 0


def test_a_table_of_differences_keeps_its_zeros_and_one_corpus_reads_right(tmp_path) -> None:
    out = tmp_path / "one"
    out.mkdir()
    results = builder_results()
    results["exam"]["corpora"] = {"c0": results["exam"]["corpora"]["c0"]}
    for d in results["exam"]["differences"].values():
        d.update(mean=0.0, ci=[0.0, 0.0])
    write_outputs(out, results, _Tracker())
    md = (out / "results.md").read_text(encoding="utf-8")
    assert "| exam utility, a - b | difference | 95% CI | verdict |" in md
    assert "- The trained builder built nothing: on the one exam corpus its store is the flat store itself" in md
