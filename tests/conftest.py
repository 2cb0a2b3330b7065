"""Suite-wide settings: Hypothesis is derandomized under CI (`CI` set), so a green run does not depend on luck;
locally it keeps exploring new examples (and a failure found there becomes an explicit `@example`)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
