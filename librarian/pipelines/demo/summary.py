"""What `librarian demo` showed, part by part, in sentences computed from its results: `out_dir/summary.md`, also the
last thing the demo prints. Each part's own report holds the details (`rl/report.html`, `jam/arms.md`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def curation_findings(results: Mapping[str, Any]) -> list[str]:
    """Part 1: what the scripted curator built, its coverage (defined), and whether the store replayed."""
    out = [f"The scripted curator built {results['index_documents']} index documents (named after their text) for "
           f"the keys of {results['questions_curated']} training questions in {results['ops_applied']} ops over "
           f"{results['docs']} facts; coverage {results['coverage_one_hop']:.1%} one hop, "
           f"{results['coverage_two_hop']:.1%} two hops (coverage: {results.get('coverage_definition', '')})."]
    if results.get("replay_identical") and not results.get("invariant_violations"):
        out.append("Replaying the trace from disk rebuilt the store byte for byte; no invariant was broken.")
    else:
        out.append(f"The store did not replay identically or broke {results.get('invariant_violations')} invariants.")
    return out


def demo_summary(results: Mapping[str, Any]) -> str:
    """summary.md: one section per part that ran."""
    parts = ["# What this demo run shows", "", "## Curation (part 1)", "",
             *(f"- {line}" for line in curation_findings(results))]
    jam = results.get("jam") or {}
    if jam.get("findings"):
        parts += ["", "## JAM memory (part 2; details in jam/arms.md)", "", *(f"- {line}" for line in jam["findings"])]
    rl = results.get("rl") or {}
    if rl.get("findings"):
        parts += ["", "## RL builder (part 3; details in rl/report.html)", "", *(f"- {line}" for line in rl["findings"])]
    return "\n".join(parts) + "\n"
