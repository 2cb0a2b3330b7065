"""Seeded randomness that leaves the caller's random state as it was (the learner's seeded LoRA init).

`torch.manual_seed` reseeds the CPU generator and every CUDA device's (or, before CUDA starts, queues that seed
for its start), while `torch.random.fork_rng(devices=[])` restores only the CPU generator: together they leave
the global CUDA generators reseeded. `seeded` seeds and restores exactly the same generators instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch  # noqa: TID253 (generator state)


def cuda_devices(device: Any) -> list[int]:
    """The CUDA devices a learner on `device` draws from: none on the CPU, else the named (or current) one."""
    where = torch.device(device)
    if where.type != "cuda":
        return []
    return [where.index if where.index is not None else torch.cuda.current_device()]


@contextmanager
def seeded(seed: int, devices: Sequence[int] = ()) -> Iterator[None]:
    """Inside: the CPU generator and the generators of the CUDA `devices` seeded with `seed`. After: each of
    them as it was before, and no other generator touched."""
    with torch.random.fork_rng(devices=list(devices)):
        torch.default_generator.manual_seed(seed)
        for index in devices:  # fork_rng read their state, so CUDA has started and the generators exist
            torch.cuda.default_generators[index].manual_seed(seed)
        yield
