"""Measures a real learner update's memory by the estimate's phases (`memory_estimate`): the bytes alive above a
starting point at each phase's widest moment.

On a GPU the figures are CUDA's allocator statistics (`torch.cuda.max_memory_allocated`, its peak reset at each
phase's start). On the CPU they come from `torch.profiler` with `profile_memory`: the profiler hears every call
to torch's CPU allocator and every free with its size (the same hook the CUDA allocator reports through), and
the CPU allocator keeps no cache, so these events summed in time order are the bytes of tensors alive at each
moment, temporaries inside an operator included (the profiler does not report the free of a block allocated
before it started, so there the figures count what was allocated inside; an update frees nothing older than
itself but a few bytes). A phase boundary is recorded there as one marker allocation of an odd size, freed at
once.

Phases follow the learner's own calls: `forward` until `engine.backward`, `logprobs` until the gradient reaches
the final norm's input (the head's backward is over), `backward` until `engine.backward` returns, `reference`
around a forward pass without gradients, `step` around `engine.step`. Torch is imported inside the functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from librarian.planning.model_shape import GIB

MARKER = 1_000_003  # bytes of a CPU phase marker (an odd size no tensor of this code has)


@dataclass
class PhaseMeter:
    """Peak bytes above the starting point, by phase, on `device` (cuda or cpu)."""

    device: Any
    peaks: dict[str, int] = field(default_factory=dict)
    alive: int = 0  # bytes alive at the end, above the starting point
    slack: int = 0  # CUDA: the allocator's reserve above its allocations at the peaks (cached, fragmented)
    _phase: str = "forward"
    _base: int = 0
    _names: list[str] = field(default_factory=list)
    _profiler: Any = None

    @property
    def cuda(self) -> bool:
        return str(self.device).startswith("cuda")

    @property
    def peak(self) -> int:
        return max(self.peaks.values(), default=0)

    def __enter__(self) -> PhaseMeter:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._profiler.__enter__()
        self._names = [self._phase]
        return self

    def mark(self, phase: str) -> None:
        """The current phase ends here and `phase` begins."""
        import torch

        if phase == self._phase:
            return
        if self.cuda:
            self._close_cuda()
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            torch.empty(MARKER, dtype=torch.uint8)  # allocated and freed at once: the boundary in the events
            self._names.append(phase)
        self._phase = phase

    def _close_cuda(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)
        top = torch.cuda.max_memory_allocated(self.device)
        self.peaks[self._phase] = max(self.peaks.get(self._phase, 0), top - self._base)
        self.slack = max(self.slack, torch.cuda.max_memory_reserved(self.device) - top)

    def __exit__(self, *exc: Any) -> None:
        if self.cuda:
            import torch

            self._close_cuda()
            self.alive = torch.cuda.memory_allocated(self.device) - self._base
            return
        self._profiler.__exit__(*exc)
        events = sorted((e.start_ns(), e.nbytes()) for e in self._profiler.profiler.kineto_results.events()
                        if e.name() == "[memory]")
        alive, phase, i = 0, 0, 0
        while i < len(events):
            size = events[i][1]
            if size == MARKER and i + 1 < len(events) and events[i + 1][1] == -MARKER:
                phase, i = phase + 1, i + 2
                continue
            alive += size
            name = self._names[min(phase, len(self._names) - 1)]
            self.peaks[name] = max(self.peaks.get(name, 0), alive)
            i += 1
        self.alive = alive


def measured(device: Any, fn: Any) -> tuple[Any, PhaseMeter]:
    """(`fn()`, the meter that watched it as one phase)."""
    with PhaseMeter(device) as meter:
        out = fn()
    return out, meter


def measured_update(learner: Any, run: Any) -> PhaseMeter:
    """The meter of `run()`, one update of `learner`, by phase (after a first update, as `expected` assumes)."""
    with PhaseMeter(learner.engine.device) as meter, phases_of(learner, meter):
        run()
    return meter


def expected(est: Any) -> dict[str, float]:
    """The estimate's phases (bytes) as `measured_update` sees an update after the first, of two micro-batches:
    the optimizer's states were there at the start, the gradients appear in the first micro-batch's backward and
    stay through the second's and the step."""
    return {name: (gib + est.gradients) * GIB for name, gib in est.phases.items()}


def _final_norm(model: Any) -> Any:
    """The decoder's last norm (`model.norm` of a Llama/Qwen2 causal LM, under peft or not)."""
    found = [m for name, m in model.named_modules() if name.endswith("model.norm")]
    if not found:
        raise ValueError(f"no final norm (a module named model.norm) in {type(model).__name__}")
    return found[-1]


@contextlib.contextmanager
def phases_of(learner: Any, meter: PhaseMeter) -> Iterator[PhaseMeter]:
    """`meter` marking the phases of `learner`'s calls while inside (the learner's own methods, shadowed for the
    duration by instance attributes that mark and call through)."""
    import torch

    engine = learner.engine
    backward, step, stats = engine.backward, engine.step, learner.token_stats

    def marked_backward(loss: Any) -> None:
        meter.mark("logprobs")
        backward(loss)
        meter.mark("forward")

    def marked_step() -> float:
        meter.mark("step")
        try:
            return step()
        finally:
            meter.mark("forward")

    def marked_stats(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            return stats(*args, **kwargs)
        meter.mark("reference")
        try:
            return stats(*args, **kwargs)
        finally:
            meter.mark("forward")

    def head_done(_module: Any, args: tuple) -> None:
        if torch.is_grad_enabled() and args[0].requires_grad:
            args[0].register_hook(lambda grad: meter.mark("backward"))

    hook = _final_norm(learner.model).register_forward_pre_hook(head_done)
    engine.backward, engine.step, learner.token_stats = marked_backward, marked_step, marked_stats
    try:
        yield meter
    finally:
        hook.remove()
        del engine.backward, engine.step, learner.token_stats
