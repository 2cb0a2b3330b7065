"""What an RL run changed in how its policy acts: per step, the share of trajectories that call each tool, for a
run and its lr=0 control, and the run-minus-control difference over the last steps with a 95% CI.

A reward that hinges on which corpus a step drew can hide a policy that changed (or show a gain that is only the
corpora). The control samples the same corpora with the same seeds from the same warm start, so a tool whose
share moves in the run and not in the control is something the updates taught, on corpora the run saw once.
It says nothing about whether the change earns reward: read it next to the gain over the control.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from librarian.evaluation.learning_curves import gain_over_control, unit_rewards_by_step
from librarian.evaluation.plots import StepSeries, plot_step_panels
from librarian.models.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

LATE_STEPS = 6
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


def called_tools(row: Mapping[str, Any]) -> frozenset[str]:
    """The names of the tools a trajectory row's turns called: a turn's `calls` (names) where the row keeps
    them, else its text's well-formed `<tool_call>` blocks."""
    names: set[str] = set()
    for turn in row.get("turns", ()):
        if isinstance(turn.get("calls"), list):
            names.update(c for c in turn["calls"] if isinstance(c, str))
            continue
        for block in _BLOCK.findall(str(turn.get("text", ""))):
            try:
                call = json.loads(block)
            except json.JSONDecodeError:
                continue
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                names.add(call["name"])
    return frozenset(names)


def tools_seen(*run_dirs: Path) -> list[str]:
    """Every tool any trajectory of the runs called, sorted."""
    seen: set[str] = set()
    for run_dir in run_dirs:
        with (Path(run_dir) / "trajectories.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                seen |= called_tools(json.loads(line))
    return sorted(seen)


def tool_use_by_step(run_dir: Path, tool: str) -> dict[int, list[tuple[str, float]]]:
    """Step -> one (unit, 1.0 or 0.0) a trajectory: whether it called `tool`."""
    return unit_rewards_by_step(run_dir, lambda row: float(tool in called_tools(row)))


def late_shift(run: dict[int, list[tuple[str, float]]], control: dict[int, list[tuple[str, float]]],
               last: int = LATE_STEPS, seed: int = 0) -> dict[str, Any]:
    """The run's mean minus the control's over the last `last` steps both have (paired trajectory by trajectory,
    whole units resampled), never including the first step (still one policy); raises ValueError with fewer
    than 2 shared steps."""
    steps = sorted(set(run) & set(control))
    if len(steps) < 2:
        raise ValueError(f"a late shift needs at least 2 steps in both runs, they share {len(steps)}")
    start = steps[max(1, len(steps) - last)]
    out = gain_over_control(run, control, skip=start, seed=seed)
    return {"difference": out["gain"], "ci": out["ci"], "steps": out["steps"], "from_step": start}


def step_means(per_step: dict[int, list[tuple[str, float]]]) -> list[float]:
    """The mean of each step's values, in step order."""
    return [sum(x for _, x in v) / len(v) for _, v in sorted(per_step.items())]


def behaviour_fields(run_dir: Path, control_dir: Path, last: int = LATE_STEPS) -> dict[str, Any]:
    """A learning benchmark's behaviour fields: `tool_rates` (tool -> run and control share per step) and
    `late_tool_shift` (tool -> run minus control over the last `last` steps, with its CI)."""
    rates: dict[str, dict[str, list[float]]] = {}
    shifts: dict[str, dict[str, Any]] = {}
    for tool in tools_seen(run_dir, control_dir):
        run, control = tool_use_by_step(run_dir, tool), tool_use_by_step(control_dir, tool)
        rates[tool] = {"run": step_means(run), "control": step_means(control)}
        try:
            shifts[tool] = late_shift(run, control, last)
        except ValueError:
            continue
    return {"tool_rates": rates, "late_tool_shift": shifts}


def plot_behaviour(path: Path, rates: Mapping[str, Mapping[str, Sequence[float]]],
                   unit: str = "builds") -> Path:
    """One panel per tool: the share of `unit` calling it per step, the run against the control."""
    panels = {f"share of {unit} calling {tool}": {
        name: StepSeries(list(range(len(values))), list(values)) for name, values in (
            ("GRPO (run)", by["run"]), ("learner.lr=0 (control)", by["control"])) if values}
        for tool, by in rates.items()}
    return plot_step_panels(panels, path, title="what the policy does, step by step")
