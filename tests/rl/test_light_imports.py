"""`import librarian.rl` (and a recipe's config) loads neither torch nor Ray: both come with `Trainer`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(code: str) -> list[str]:
    """Which of torch and ray are in `sys.modules` after running `code` in a fresh interpreter."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in ('torch', 'ray') if m in sys.modules) or '-')"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env).stdout
    return [] if out.strip() == "-" else out.split()


def test_the_rl_package_and_the_recipe_configs_import_without_torch():
    assert loaded_after("import librarian.rl, librarian.learner\n"
                        "from librarian.rl import RLConfig, Task, check\n"
                        "import librarian.pipelines.builder.config, librarian.pipelines.researcher.config") == []


def test_the_trainer_brings_torch_on_first_use():
    assert "torch" in loaded_after("from librarian.rl import Trainer\nassert Trainer.__name__ == 'Trainer'")
