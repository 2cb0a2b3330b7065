"""`librarian build`: outputs, replay, resuming from the trace, Ray shards, the policy builder, the CLI."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from librarian.app.build import BuildConfig, BuildInterrupted, run
from librarian.cli import main as cli
from librarian.models import scripted
from librarian.workspace import Workspace, WorkspaceError, codec, read_trace, replay


def _hash(folder: Path) -> str:
    return codec.content_hash(*codec.read_parquet(folder / "snapshot.parquet"))


def test_build_writes_everything_and_replays(notes: Path, tmp_path: Path) -> None:
    out = tmp_path / "ws"
    results = run(BuildConfig(corpus=str(notes), out_dir=str(out), embedder="none"))
    for name in ("initial.parquet", "snapshot.parquet", "trace.parquet", "index/manifest.json", "workspace.json",
                 "export/entities/ada-moss.md", "export/trips/lisbon.md"):
        assert (out / name).exists(), name
    saved = json.loads((out / "results.json").read_text())
    assert saved["ops_applied"] == results["ops_applied"] > 0
    assert set(saved["cost"]) >= {"model_calls", "tokens_generated", "wall_s"}
    initial = Workspace.from_state(*codec.read_parquet(out / "initial.parquet"))
    assert replay(initial, read_trace(out / "trace.parquet")).content_hash() == _hash(out)
    exported = (out / "export/entities/ada-moss.md").read_text()
    assert "provenance: [people.md, trips/lisbon.md]" in exported


def test_resume_after_interruption_gives_the_same_workspace(kb200: Path, built200: Path, tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    cfg = BuildConfig(corpus=str(kb200), out_dir=str(out), builder="kbgym_keys", embedder="none",
                      checkpoint_every=50, stop_after=120, export=False)
    with pytest.raises(BuildInterrupted):
        run(cfg)
    assert len(read_trace(out / "trace.parquet")) == 120
    cfg.stop_after = None
    results = run(cfg)
    assert results["resumed_from_op"] == 120 and results["ops_this_run"] == results["ops_applied"] - 120
    assert _hash(out) == _hash(built200)


def test_resume_refuses_another_corpus_or_builder(notes: Path, kb200: Path, tmp_path: Path) -> None:
    out = tmp_path / "ws"
    run(BuildConfig(corpus=str(notes), out_dir=str(out), embedder="none", export=False))
    with pytest.raises(WorkspaceError, match="different corpus"):
        run(BuildConfig(corpus=str(kb200), out_dir=str(out), embedder="none", export=False))
    with pytest.raises(WorkspaceError, match="pass --restart"):
        run(BuildConfig(corpus=str(notes), out_dir=str(out), builder="kbgym_keys", embedder="none", export=False))
    fresh = run(BuildConfig(corpus=str(notes), out_dir=str(out), builder="flat", embedder="none", export=False,
                            restart=True))
    assert fresh["ops_applied"] == 0


@pytest.mark.slow
def test_ray_shards_build_the_same_workspace(kb200: Path, built200: Path, tmp_path: Path) -> None:
    out = tmp_path / "ray"
    ray_dir = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths must stay under 107 bytes
    try:
        results = run(BuildConfig(corpus=str(kb200), out_dir=str(out), builder="kbgym_keys", embedder="none",
                                  workers=2, export=False, ray_temp_dir=ray_dir))
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert results["cost"]["shards"] == 4 and results["cost"]["workers"] == 2
    assert _hash(out) == _hash(built200)


def test_policy_builder_with_a_scripted_backend(notes: Path, tmp_path: Path) -> None:
    out = tmp_path / "policy"
    # a scripted builder given on the command line's terms: the backend by name and its policy option

    def one_file(messages, tools=None):
        if any(m["role"] == "tool" for m in messages):
            return scripted.tool_call_text("stop")
        return scripted.tool_call_text("create_file", path="summary.md", text="Ada Moss and Ben Hale",
                                       sources=["people.md", "trips/porto.txt"])

    results = run(BuildConfig(corpus=str(notes), out_dir=str(out), builder="policy", embedder="none",
                              backend="scripted", backend_args={"policy": one_file}, budget=5))
    assert results["ops_applied"] == 1 and results["cost"]["model_calls"] == 2
    view = codec.read_parquet(out / "snapshot.parquet")[0]
    made = next(n for n in view if n.path == "summary.md")
    assert made.kind == "synthetic" and made.provenance == ("people.md", "trips/porto.txt")


def test_cli_build_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["build", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
    assert "is not a folder of .txt/.md files" in capsys.readouterr().err


def test_policy_builder_defaults_to_the_scripted_librarian_builder(notes: Path, tmp_path: Path) -> None:
    out = tmp_path / "heuristic"
    results = run(BuildConfig(corpus=str(notes), out_dir=str(out), builder="policy", embedder="none", export=False))
    assert results["cost"]["model_calls"] >= 1 and results["config"]["backend"] == "scripted"
    initial = Workspace.from_state(*codec.read_parquet(out / "initial.parquet"))
    assert replay(initial, read_trace(out / "trace.parquet")).content_hash() == _hash(out)
    again = run(BuildConfig(corpus=str(notes), out_dir=str(out), builder="policy", embedder="none", export=False))
    assert again["resumed_from_op"] == results["ops_applied"]
