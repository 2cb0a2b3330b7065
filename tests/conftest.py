"""Suite-wide settings: Hypothesis is derandomized under CI (`CI` set), so a green run does not depend on luck;
locally it keeps exploring new examples (and a failure found there becomes an explicit `@example`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: two workers on two cores, one torch thread each
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def ray_session(request):
    """A local Ray for one test module: `RAY_CPUS` CPUs (a module constant; default 2), its own temp folder
    (socket paths must stay short), shut down after the module."""
    import ray

    ray.init(num_cpus=getattr(request.module, "RAY_CPUS", 2), include_dashboard=False,
             _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"), log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


# The modules that take longest (a minute or more on 2 cores, `--durations`), longest first. `make test` runs the
# suite on two pytest-xdist workers, a whole module on one worker (`--dist loadfile`: a module's fixtures are built
# once); a long module started last would leave one worker running it alone, so these start first.
HEAVY_FIRST = (
    # first, so that it runs in a worker no other module has run in: its CPU allocator measurements drift (more
    # bytes kept a layer) after some other module's tests in the same process, though not after its imports
    "planning/test_memory_phases.py",
    "pipelines/test_learning_check_turns.py",
    "pipelines/test_ablate_search.py",
    "cluster/test_learner_group.py",
    "pipelines/test_train_builder.py",
    "pipelines/test_learning_check.py",
    "roles/test_smollm2_episode.py",
    "pipelines/test_train_researcher.py",
    "pipelines/test_ablate.py",
    "pipelines/test_update_direction.py",
    "pipelines/test_sweep_resources.py",
    "rl/test_async.py",
    "tracking/test_conventions.py",
    "cluster/test_rollout_pool.py",
    "models/test_vllm.py",
)


def pytest_collection_modifyitems(session, config, items):
    """Heavy modules first (`HEAVY_FIRST`), the rest in their usual order; tests within a module keep theirs."""
    root = Path(__file__).resolve().parent

    def rank(item) -> int:
        try:
            name = Path(str(item.path)).resolve().relative_to(root).as_posix()
        except ValueError:
            return len(HEAVY_FIRST)
        return HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)

    items.sort(key=rank)  # stable: each module's tests stay together and in order
