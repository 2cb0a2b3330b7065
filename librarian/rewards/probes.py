"""Answerability probes (paper 000 §2.3, A.7): when to probe, and the per-turn rewards they give.

Probing every turn is too expensive, so U is measured every `every` builder
turns (at most `max_probes` times, optionally only once the workspace is
mature) and the potential is held between probes: Phi_t = U at the latest
probe at or before t (Phi_0 = U(F_0)). Per-turn rewards are then the shaped
dense rewards over Phi (`dense_rewards`), which with gamma = 1 are the
answerability deltas at probe turns and zero elsewhere, minus construction
costs where alpha > 0.

The terminal evaluation of the final workspace enters in one of three ways:
`score` (paper 000's Algorithm 1: the terminal score is added to the last
turn's reward), `delta` (the final utility is the last potential, so the
rewards telescope exactly to U(F_T) - U(F_0) - alpha sum Cost), or `none`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from librarian.rewards.utility import RewardError, dense_rewards

Terminal = Literal["score", "delta", "none"]


@dataclass(frozen=True, slots=True)
class ProbeSchedule:
    """Probe every `every` turns, at most `max_probes` times, from turn `min_turn` on, once the
    workspace has at least `min_synthetic` synthetic files; each probe answers each question
    `repeats` times. Paper 000 A.7: every 8 turns, at most 4 probes."""

    every: int = 8
    max_probes: int = 4
    min_turn: int = 0
    min_synthetic: int = 0
    repeats: int = 1

    def __post_init__(self) -> None:
        for name, low in (("every", 1), ("max_probes", 0), ("min_turn", 0), ("min_synthetic", 0), ("repeats", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise RewardError(f"probe schedule: {name} must be an integer >= {low} (got {v!r})")

    def should_probe(self, turn: int, probes_done: int, synthetic: int | None = None) -> bool:
        """Whether to probe after builder turn `turn` (1-based), given probes already run."""
        if turn < 1:
            raise RewardError(f"turns are numbered from 1 (got {turn})")
        if probes_done < 0:
            raise RewardError(f"probes_done must be >= 0 (got {probes_done})")
        if self.min_synthetic and synthetic is None:
            raise RewardError("this schedule has min_synthetic set: pass the workspace's synthetic file count")
        mature = synthetic is None or synthetic >= self.min_synthetic
        return turn % self.every == 0 and turn >= self.min_turn and probes_done < self.max_probes and mature

    def probe_turns(self, horizon: int) -> list[int]:
        """The turns probed in a construction of `horizon` turns, ignoring `min_synthetic`."""
        if horizon < 0:
            raise RewardError(f"horizon must be >= 0 (got {horizon})")
        out: list[int] = []
        for t in range(1, horizon + 1):
            if self.should_probe(t, len(out), synthetic=self.min_synthetic):
                out.append(t)
        return out


def held_potentials(turns: int, initial: float, probes: Mapping[int, float]) -> list[float]:
    """Phi_0..Phi_T: U(F_0), then each probe's U held until the next probe."""
    if turns < 0:
        raise RewardError(f"turns must be >= 0 (got {turns})")
    bad = sorted(t for t in probes if not isinstance(t, int) or not 1 <= t <= turns)
    if bad:
        raise RewardError(f"probe turns {bad} are outside 1..{turns}")
    phi = [float(initial)]
    for t in range(1, turns + 1):
        phi.append(float(probes[t]) if t in probes else phi[-1])
    return phi


def probe_rewards(turns: int, initial: float, probes: Mapping[int, float], final: float | None = None, *,
                  build_costs: Sequence[float] | None = None, alpha: float = 0.0, gamma: float = 1.0,
                  terminal: Terminal = "score") -> list[float]:
    """Per-turn rewards r_1..r_T of one construction from its probe measurements.

    `initial` is U(F_0), `probes` maps a turn to the U measured after it,
    `final` is the terminal evaluation of F_T (required unless terminal is
    `none`). See the module docstring for `terminal`.
    """
    if terminal not in ("score", "delta", "none"):
        raise RewardError(f"terminal must be 'score', 'delta' or 'none' (got {terminal!r})")
    if terminal != "none" and final is None:
        raise RewardError(f"terminal={terminal!r} needs the final workspace's utility")
    if terminal != "none" and turns == 0:
        raise RewardError("a construction with no turns has no turn to credit the terminal reward to")
    phi = held_potentials(turns, initial, probes)
    if terminal == "delta":
        phi[-1] = float(final)  # type: ignore[arg-type]
    rewards = dense_rewards(phi, build_costs, alpha=alpha, gamma=gamma)
    if terminal == "score":
        rewards[-1] += float(final)  # type: ignore[arg-type]
    return rewards
