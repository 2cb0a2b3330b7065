"""Suite-wide settings: Hypothesis is derandomized under CI (`CI` set), so a green run does not depend on luck;
locally it keeps exploring new examples (and a failure found there becomes an explicit `@example`)."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="module")
def ray_session(request):
    """A local Ray for one test module: `RAY_CPUS` CPUs (a module constant; default 2), its own temp folder
    (socket paths must stay short), shut down after the module."""
    import ray

    ray.init(num_cpus=getattr(request.module, "RAY_CPUS", 2), include_dashboard=False,
             _temp_dir=tempfile.mkdtemp(prefix="r", dir="/tmp"), log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
