"""Injected faults, to test that the pools redo a dead worker's work (no trajectory lost or counted twice).

`CrashPlan(jobs=("s1-c0",), marker_dir=DIR)`: a rollout worker that starts
one of these jobs exits hard (as a killed process would), once per job: it
leaves a marker file first, so the worker that redoes the job finishes it.
Jobs in `hang_jobs` block instead (the marker tells a test when to `ray.kill` it).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass
class CrashPlan:
    """Jobs whose first attempt kills the worker process mid-batch."""

    jobs: list[str] = field(default_factory=list)
    marker_dir: str = ""
    after_episodes: int = 0  # crash after this many of the job's rollouts finished (0: before any)
    hang_jobs: list[str] = field(default_factory=list)  # these block until killed instead

    def should_crash(self, job_id: str, done: int) -> bool:
        """Whether to crash now (leaves the marker, so it answers True once per job)."""
        if (job_id not in self.jobs and job_id not in self.hang_jobs) or done != self.after_episodes:
            return False
        if not self.marker_dir:
            raise ValueError("CrashPlan needs a marker_dir so a crash happens only once per job")
        marker = Path(self.marker_dir) / f"crashed-{job_id}"
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        return True

    def crash(self, job_id: str) -> None:
        if job_id in self.hang_jobs:
            log.warning("injected hang: worker %d blocks during job %s", os.getpid(), job_id)
            time.sleep(3600)
        log.warning("injected crash: worker %d dies during job %s", os.getpid(), job_id)
        os._exit(1)
