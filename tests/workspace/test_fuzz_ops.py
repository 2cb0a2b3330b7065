"""The fuzz benchmark at 2,000 ops: no op corrupts the store, breaks replay or the Arrow round trip, or escapes
as anything but `WorkspaceError`; and the fuzzer really exercises every op kind both ways."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from librarian.workspace import Add
from librarian.workspace.nodes import Node
from librarian.workspace.ops import OP_TYPES

ROOT = Path(__file__).resolve().parents[2]


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_ops", ROOT / "benchmarks" / "fuzz_ops.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_ops"] = module
    spec.loader.exec_module(module)
    return module


def test_two_thousand_random_ops_break_nothing(tmp_path: Path) -> None:
    fuzz = _fuzz_module()
    results = fuzz.main(["--ops", "2000", "--seed", "0", "--episode", "400", "--out", str(tmp_path)])
    breaks = {k: results[k] for k in fuzz.BREAKS}
    assert breaks == dict.fromkeys(fuzz.BREAKS, 0), json.dumps(results["examples"], indent=1)
    assert results["accepted"] + results["rejected"] == results["ops"] == 2000
    assert 0.25 < results["accepted"] / results["ops"] < 0.75  # both sides of the boundary are exercised
    assert set(results["by_kind"]) == set(OP_TYPES) and len(OP_TYPES) == 11
    for kind, counts in results["by_kind"].items():
        assert counts.get("accepted", 0) >= 10 and counts.get("rejected", 0) >= 10, (kind, counts)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["ops"] == 2000 and written["episodes"] >= 5


def test_the_fuzzer_sees_a_store_that_cannot_be_saved() -> None:
    """The round-trip check is live: a node holding a lone surrogate (planted past the op boundary) is caught."""
    fuzz = _fuzz_module()
    run = fuzz.Fuzz(seed=1, episode=100)
    run.new_episode()
    result = run.ws.apply(Add("fine"))
    run.replica.apply(Add("fine"))
    node = run.ws.get(result.created[0])
    run.ws._nodes[node.id] = Node(**{**{f: getattr(node, f) for f in node.__slots__}, "text": "bad \ud83d"})
    run.check_applied({"op": "add", "text": "fine"}, result)
    assert run.counts["invariant_breaks"] + run.counts["replay_mismatches"] + run.counts["roundtrip_failures"] >= 1
