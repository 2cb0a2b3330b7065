"""MLflow's conventions for a run: where it goes, its experiment, its name and its standard tags.

Store: the config's `tracking_uri`, else `LIBRARIAN_TRACKING_URI`, else
MLflow's own `MLFLOW_TRACKING_URI`, else a local store under the run's
out_dir. Experiment: the config's `experiment`, else `LIBRARIAN_EXPERIMENT`,
else MLflow's `MLFLOW_EXPERIMENT_NAME`, else the pipeline's name. (A sweep's
cell is the exception: the sweep's `LIBRARIAN_*` variables win; see
`tracker.py`.) Run names are readable and unique: pipeline, out_dir's name,
UTC time and a random suffix. Tags: `mlflow.source.git.commit` (when the
package runs from a git checkout), `mlflow.source.name`, `mlflow.user`,
`librarian.version`, `librarian.command` and `librarian.pipeline`.
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import secrets
import shlex
import subprocess
import sys
import time
from pathlib import Path

from librarian import __version__
from librarian.redact import redact_text

log = logging.getLogger(__name__)
ENV_URI = "LIBRARIAN_TRACKING_URI"
ENV_EXPERIMENT = "LIBRARIAN_EXPERIMENT"
MLFLOW_URI = "MLFLOW_TRACKING_URI"
MLFLOW_EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
MAX_TAG_CHARS = 5000


def tracking_uri(configured: str | None = None) -> str | None:
    """The store a run logs to; None means a local store under its out_dir."""
    return configured or os.environ.get(ENV_URI) or os.environ.get(MLFLOW_URI) or None


def experiment_name(configured: str | None, pipeline: str) -> str:
    """The experiment a run logs to (the pipeline's name unless the config or the environment names one)."""
    return configured or os.environ.get(ENV_EXPERIMENT) or os.environ.get(MLFLOW_EXPERIMENT) or pipeline


def run_name(pipeline: str, out_dir: str | Path | None = None) -> str:
    """`<pipeline>-<out_dir name>-<UTC yyyymmdd-HHMMSS>-<8 hex>`: readable, and unique even within a second
    (8 random hex digits: 50 names in one second collide with odds of about 3e-7; 4 digits gave about 2%)."""
    label = Path(out_dir).resolve().name if out_dir else ""
    parts = [pipeline] + ([label] if label and label != pipeline else [])
    return "-".join([*parts, time.strftime("%Y%m%d-%H%M%S", time.gmtime()), secrets.token_hex(4)])


@functools.cache
def git_commit(where: str | None = None) -> str | None:
    """The commit of the git checkout holding `where` (default: this package's source), if it is one."""
    folder = where or str(Path(__file__).resolve().parents[2])
    try:
        done = subprocess.run(["git", "-C", folder, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("no git commit for %s: %s", folder, exc)
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) >= 40 else None


def command_line(argv: list[str] | None = None) -> str:
    """The command that started this process, as a shell would read it (`librarian evaluate out_dir=...`)."""
    args = list(sys.argv if argv is None else argv)
    if args:
        args[0] = Path(args[0]).name
    return redact_text(shlex.join(args))[:MAX_TAG_CHARS]  # no credential given on the command line


def standard_tags(pipeline: str) -> dict[str, str]:
    """The tags every run carries (MLflow's `mlflow.*` names where MLflow has one)."""
    tags = {"mlflow.source.name": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "librarian",
            "mlflow.source.type": "LOCAL", "librarian.version": __version__,
            "librarian.command": command_line(), "librarian.pipeline": pipeline}
    try:
        tags["mlflow.user"] = getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        pass
    commit = git_commit()
    if commit:
        tags[GIT_COMMIT_TAG] = commit
    return tags
