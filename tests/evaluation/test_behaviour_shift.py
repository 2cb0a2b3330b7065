"""`behaviour_shift`: which tools a run's trajectories call, step by step, against its lr=0 control."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from librarian.evaluation.behaviour_shift import (
    behaviour_fields,
    called_tools,
    late_shift,
    plot_behaviour,
    tool_use_by_step,
)


def turn(*names: str, broken: bool = False) -> dict:
    blocks = [f'<tool_call>{{"name": "{n}", "arguments": {{}}}}</tool_call>' for n in names]
    if broken:
        blocks.append('<tool_call>{"name": "merge_files", "argu</tool_call>')
    return {"text": "\n".join(blocks), "reward": 0.0}


def write_run(folder, steps: list[list[list[str]]]) -> None:
    """steps[s][b] = the tools build b of step s calls, one turn each."""
    folder.mkdir(parents=True)
    with (folder / "trajectories.jsonl").open("w", encoding="utf-8") as fh:
        for s, builds in enumerate(steps):
            for b, names in enumerate(builds):
                fh.write(json.dumps({"step": s, "corpus": f"c{b}", "index": b, "turns": [turn(n) for n in names]}) + "\n")


def test_called_tools_reads_well_formed_blocks_or_the_kept_call_names():
    row = {"turns": [turn("create_file", "create_file"), turn("stop", broken=True)]}
    assert called_tools(row) == frozenset({"create_file", "stop"})  # the cut-off merge_files block is not a call
    kept = {"turns": [{"text": "<tool_call>{\"name\": \"sear", "calls": ["search", "read"]}]}
    assert called_tools(kept) == frozenset({"search", "read"})
    assert called_tools({"turns": [{"text": "no call here"}]}) == frozenset()


def test_a_run_that_stops_merging_shows_a_negative_late_shift(tmp_path):
    builds = 4
    run = [[["create_file", "merge_files"]] * builds] * 2 + [[["create_file"]] * builds] * 6
    control = [[["create_file", "merge_files"]] * builds] * 8
    write_run(tmp_path / "run", run)
    write_run(tmp_path / "control", control)
    assert [x for _, x in tool_use_by_step(tmp_path / "run", "merge_files")[7]] == [0.0] * builds
    fields = behaviour_fields(tmp_path / "run", tmp_path / "control", last=6)
    assert fields["tool_rates"]["merge_files"]["run"] == [1.0, 1.0] + [0.0] * 6
    assert fields["tool_rates"]["merge_files"]["control"] == [1.0] * 8
    merge = fields["late_tool_shift"]["merge_files"]
    assert merge["difference"] == -1.0 and merge["ci"] == [-1.0, -1.0]
    assert merge["steps"] == 6 and merge["from_step"] == 2
    assert fields["late_tool_shift"]["create_file"]["difference"] == 0.0
    out = plot_behaviour(tmp_path / "behaviour.png", fields["tool_rates"])
    assert out.stat().st_size > 1000


def test_late_shift_never_counts_the_first_step_and_needs_two_steps():
    run = {0: [("a", 1.0)], 1: [("a", 0.0)], 2: [("a", 0.0)]}
    control = {0: [("a", 1.0)], 1: [("a", 1.0)], 2: [("a", 1.0)]}
    out = late_shift(run, control, last=10)
    assert out["from_step"] == 1 and out["steps"] == 2 and out["difference"] == -1.0
    with pytest.raises(ValueError, match="at least 2 steps"):
        late_shift({0: [("a", 1.0)]}, {0: [("a", 1.0)], 1: [("a", 0.0)]})


shares = st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=3, max_size=3), min_size=3, max_size=9)


@settings(max_examples=40, deadline=None)
@given(shares, st.data())
def test_late_shift_is_antisymmetric_and_bounded(run_steps, data):
    control_steps = data.draw(st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=3, max_size=3),
                                       min_size=len(run_steps), max_size=len(run_steps)))
    run = {i: [(str(k), x) for k, x in enumerate(v)] for i, v in enumerate(run_steps)}
    control = {i: [(str(k), x) for k, x in enumerate(v)] for i, v in enumerate(control_steps)}
    forward, backward = late_shift(run, control, last=4), late_shift(control, run, last=4)
    assert forward["difference"] == pytest.approx(-backward["difference"])
    assert -1.0 <= forward["ci"][0] <= forward["difference"] <= forward["ci"][1] <= 1.0
    assert late_shift(run, run, last=4)["ci"] == [0.0, 0.0]
