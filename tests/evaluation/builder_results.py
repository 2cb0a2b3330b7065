"""A synthetic builder run's results.json (the shape `train_builder` writes), for report and findings tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def builder_results(flat_f1: float = 1.0, trained_same_as_flat: bool = True, lr: float = 1e-4,
                    trained_minus_flat: tuple[float, float, float] = (0.0, 0.0, 0.0),
                    control: dict[str, Any] | None = None, no_signal_steps: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """Two exam corpora, flat vs scripted vs trained builder, 3 GRPO steps, a 4-update SFT."""
    def row(name: str, f1: float, **more: Any) -> dict[str, Any]:
        return {"name": name, "n": 4, "f1": f1, "actions": 2.5, "exhausted": 0.0, "tokens_read": 120.0,
                "files_read": 1.5, "synthetic_read": 0.0, **more}

    builder = {"f1_ci": [flat_f1, flat_f1], "actions_ci": [2.0, 3.0], "rho": 1.0, "rho_ci": [0.9, 1.1],
               "f1_delta": 0.0, "f1_delta_ci": [0.0, 0.0]}
    rows = [row("flat", flat_f1, build_actions=0.0),
            row("scripted_builder", flat_f1, **builder, build_actions=6.0, construction_tokens=0),
            row("trained_builder", flat_f1, **builder, build_actions=3.0, construction_tokens=310)]
    corpora = {f"c{i}": {"flat": {"utility": 0.9, "f1": flat_f1},
                         "scripted_builder": {"utility": 0.92, "f1": flat_f1, "same_as_flat": False},
                         "trained_builder": {"utility": 0.9, "f1": flat_f1, "same_as_flat": trained_same_as_flat}}
               for i in range(2)}
    mean, low, high = trained_minus_flat
    exam = {"corpora": corpora, "builds": {},
            "utilities": {"flat": {"mean": 0.9, "ci": [0.85, 0.95], "n": 4},
                          "scripted_builder": {"mean": 0.92, "ci": [0.88, 0.96], "n": 4},
                          "trained_builder": {"mean": 0.9 + mean, "ci": [0.85, 0.95], "n": 4}},
            "differences": {"trained_builder-flat": {"mean": mean, "ci": [low, high]},
                            "scripted_builder-flat": {"mean": 0.02, "ci": [0.01, 0.03]},
                            "trained_builder-scripted_builder": {"mean": mean - 0.02, "ci": [low - 0.03, high - 0.01]}}}
    history = [{"step": float(s), "reward": -0.03 + 0.002 * s, "utility_gain": 0.0, "final_utility": 0.9,
                "loss": 0.0 if s in no_signal_steps else 0.01,
                "nonzero_advantage_fraction": 0.0 if s in no_signal_steps else 0.5} for s in range(3)]
    return {"grpo_steps": 3, "policy_version": 4, "history": history, "rows": rows, "exam": exam,
            "sft": {"teacher_builds": 2, "verified": 1, "samples": 7, "sft_steps": 4, "sft_loss_first": 1.9,
                    "sft_loss_last": 1.2},
            "config": {"seed": 1, "steps": 3, "learner": {"lr": lr, "batch_size": 2, "group_size": 2},
                       "sft": {"enabled": True}},
            **({"control": control} if control else {}), "wall_s": 600.0}


def write_trajectories(out: Path, steps: int = 3, builds: int = 4) -> Path:
    """trajectories.jsonl rows as the step loop writes them: build b of every step gains 0.01 x b."""
    path = out / "trajectories.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for s in range(steps):
            for b in range(builds):
                fh.write(json.dumps({"step": s, "initial_utility": 0.9, "final_utility": 0.9 + 0.01 * b,
                                     "turns": [{"reward": -0.01}, {"reward": 0.01 * b}]}) + "\n")
    return path
