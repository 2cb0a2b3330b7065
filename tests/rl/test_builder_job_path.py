"""One builder job followed from rollout to update through the step loop, with a recording session.

The session runs the job on one in-process `BuilderRolloutWorker` (the scripted builder as a teacher, tokenized
by a tiny model, so the builds are real and their turns carry tokens), probes in this process (`LocalProbes`)
and records the update instead of running a learner. Spies on the codec count, for each frozen workspace of the
step, how often its bytes are encoded, decoded and its content hashed: once each on the way to the probe (the
worker encodes and hashes, only the probe decodes, and a content probed before is not decoded again).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from librarian.cluster.builder_worker import BuilderRolloutWorker
from librarian.config import load_config
from librarian.datasets.kbgym.build import SplitSizes, build_kbgym
from librarian.pipelines.builder.config import TrainBuilderConfig
from librarian.pipelines.builder.corpora import make_corpora
from librarian.pipelines.builder.steps import BuilderTask, initial_utilities
from librarian.rewards.construction import ProbeService
from librarian.rewards.probe_exam import LocalProbes, snapshot_key
from librarian.rl.loop import run_steps
from librarian.rl.protocols import WeightsBox
from librarian.workspace import codec

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class RecordingSession:
    """A `StepSession` in this process: rollouts on one worker, and an update that records its samples."""

    def __init__(self, worker: BuilderRolloutWorker) -> None:
        self.worker = worker
        self.records: list[Any] = []
        self.updates: list[list[Any]] = []
        self.published_versions: list[int] = []
        self._version = -1

    @property
    def version(self) -> int:
        return self._version

    @property
    def rollout_failures(self) -> int:
        return 0

    def published(self) -> WeightsBox:
        return []

    def rollout(self, jobs: Sequence[Any], weights: WeightsBox | None = None) -> dict[str, list[Any]]:
        out = {job.job_id: self.worker.run(job, weights) for job in jobs}
        self.records += [r for recs in out.values() for r in recs]
        return out

    def stop_rollouts(self) -> None:
        pass

    def step(self, samples: Sequence[Any]) -> dict[str, float]:
        self.updates.append(list(samples))
        return {"loss": 0.0}

    def publish(self) -> int:
        self._version += 1
        self.published_versions.append(self._version)
        return self._version

    def save(self, folder: str | Path, extra: dict | None = None) -> str:
        return str(folder)

    def trainable_norm(self) -> float:
        return 0.0


class TeacherTask(BuilderTask):
    """The builder's task, its jobs played by the scripted builder (tokenized by the policy's tokenizer)."""

    def jobs(self, step: int, version: int) -> list:
        return [replace(job, teacher="librarian_builder") for job in super().jobs(step, version)]


class Calls:
    """Calls of one codec function, recorded by what identifies the snapshot (its bytes, or its hash)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, seen: Callable[[tuple, Any], Any]) -> None:
        self.seen: list[Any] = []
        original = getattr(codec, name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            self.seen.append(seen(args, out))
            return out

        for module in [m for n, m in sys.modules.items() if n.startswith("librarian") and m is not None]:
            for attr, value in list(vars(module).items()):
                if value is original:  # the codec itself, and every module that imported the function by name
                    monkeypatch.setattr(module, attr, spy)


@pytest.fixture(scope="module")
def corpus():
    kb = build_kbgym(people=60, seed=1, sizes=SplitSizes(train=30, test_in=20, test_out=10, eval_in=5, eval_out=5))
    return make_corpora(kb, 1, questions=2, docs=10, splits=("train",), seed=1, prefix="c")[0]


def test_one_build_job_is_encoded_hashed_and_decoded_once_each_on_its_way_to_the_update(corpus, monkeypatch,
                                                                                        tmp_path):
    cfg = load_config(TrainBuilderConfig, [
        "rollout.options={model: tiny}", "rollout.budget=12", "rollout.constrained=false",
        "rollout.content_executor=none", "reward.every=2", "reward.max_probes=3", "probe.budget=4",
        "probe.workers=0", "learner.batch_size=1", "learner.group_size=2", "learner.filter_flat_groups=false",
        "save_trajectories=false", "checkpoint_every=0"])
    probes = ProbeService(LocalProbes(cfg.probe), {corpus.corpus_id: corpus.questions}, cfg.reward)
    task = TeacherTask(cfg, [corpus], probes, initial_utilities([corpus], probes))
    session = RecordingSession(BuilderRolloutWorker(cfg.rollout, cfg.reward))
    probed_before = {key for key, _ in probes.cache}  # the flat store, probed for U(F_0)

    encoded = Calls(monkeypatch, "table_to_ipc_bytes", lambda args, out: out)
    decoded = Calls(monkeypatch, "table_from_ipc_bytes", lambda args, out: bytes(args[0]))
    hashed = Calls(monkeypatch, "content_hash", lambda args, out: out)
    tracker = type("Tracker", (), {"log_metrics": lambda self, metrics, step: None})()
    history = run_steps(session, task, cfg, range(1), tracker, tmp_path)
    monkeypatch.undo()

    # the job went from rollout to update: two builds, their turns' samples trained on, the weights published
    assert [r.job_id for r in session.records] == [task.jobs(0, -1)[0].job_id] * 2
    assert len(session.updates) == 1 and session.updates[0] and session.published_versions == [0]
    assert history[0]["samples"] == len(session.updates[0])
    snapshots = [s for r in session.records for s in (*r.probes.values(), r.final)]
    assert all(sorted(r.probes) == [2, 4, 6] for r in session.records)
    key_of = {s.data: s.key for s in snapshots}
    assert all(snapshot_key(s.data) == s.key for s in snapshots)  # the worker's hash is the content's
    per_key = Counter(s.key for s in snapshots)
    new = {k for k in per_key if k not in probed_before}
    assert new, "the builds changed their workspaces: some snapshots are new to the probe"

    assert Counter(key_of[b] for b in encoded.seen if b in key_of) == per_key  # encoded once, on the worker
    assert Counter(k for k in hashed.seen if k in per_key) == per_key  # hashed once, where it was encoded
    assert Counter(key_of[b] for b in decoded.seen if b in key_of) == Counter(new)  # decoded once, by the probe
    assert probes.probes_run == len(probed_before) + len(new)
