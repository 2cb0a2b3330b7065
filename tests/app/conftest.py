"""Fixtures: a 200-person KBGym dataset and its workspace built by the scripted key builder (once per session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from librarian.app.build import BuildConfig, run
from librarian.datasets.kbgym.build import build_kbgym
from librarian.datasets.records import write_parquet

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"


@pytest.fixture(scope="session")
def kb200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kb200")
    write_parquet(build_kbgym(people=200, seed=1).bundle, out)
    return out


@pytest.fixture(scope="session")
def built200(kb200: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("built200")
    run(BuildConfig(corpus=str(kb200), out_dir=str(out), builder="kbgym_keys", embedder="none"))
    return out


@pytest.fixture()
def notes(tmp_path: Path) -> Path:
    """A small folder of markdown notes that mention shared names."""
    root = tmp_path / "notes"
    (root / "trips").mkdir(parents=True)
    (root / "people.md").write_text("Ada Moss works with Ben Hale at Harbor Labs.\n", encoding="utf-8")
    (root / "trips" / "lisbon.md").write_text("In May, Ada Moss flew to Lisbon for Harbor Labs.\n", encoding="utf-8")
    (root / "trips" / "porto.txt").write_text("Ben Hale visited Porto; then Lisbon again.\n", encoding="utf-8")
    (root / ".hidden.md").write_text("Secret Name Here and Ada Moss.\n", encoding="utf-8")
    return root
