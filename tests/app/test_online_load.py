"""The load test of `serve --curate`, short: 8 HTTP clients for 20 s against the real server while it swaps versions.

The full two-minute run is `python benchmarks/online_load.py --out DIR` (docs/online.md has its figures).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_eight_clients_while_versions_swap(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("online_load", ROOT / "benchmarks" / "online_load.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.run(tmp_path, clients=8, duration=20.0, every=2.0)
    assert r["requests"] > 100 and r["errors"] == 0, r["error_examples"]
    assert r["swaps_during_load"] >= 2 and r["versions_seen"] >= 2, r  # answers came from several versions
    assert r["untagged"] == 0 and r["tag_hash_mismatch"] == 0
    assert r["recomputed"] == r["requests"] and r["half_applied"] == 0  # every answer re-computed on its version
    assert r["log_rows"] == r["requests"] and r["log_missing"] == r["log_duplicates"] == r["log_unanswered"] == 0
    assert r["feedback_rows"] == r["feedback_sent"] == r["requests"] and r["feedback_duplicates"] == 0
    assert r["ok"]
