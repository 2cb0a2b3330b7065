"""Shared fixtures: one 500-person KBGym build per test session (about 0.5 s)."""

from __future__ import annotations

import pytest

from librarian.datasets.kbgym import build_kbgym


@pytest.fixture(scope="session")
def kb500():
    return build_kbgym(500, 1)
