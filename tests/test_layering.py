"""DESIGN.md's layering: a lower layer never imports a higher one (checked on every module's imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "librarian"
# rank of each top-level part of the package; a part may import only parts of strictly lower rank
RANK = {
    "config": 0, "workspace": 0, "redact": 0,
    "datasets": 1, "search": 1, "models": 1, "tracking": 1,
    "roles": 2, "rewards": 3, "learner": 4, "evaluation": 5, "cluster": 6, "planning": 7, "rl": 8, "online": 8,
    "pipelines": 9, "app": 10, "cli": 11,
}


def part_of(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root).parts
    return rel[0] if len(rel) > 1 else rel[0].removesuffix(".py")


def imported_parts(path: Path) -> set[tuple[str, int]]:
    """(top-level part, line) of every absolute `librarian.*` import in a file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        out |= {(n.split(".")[1], node.lineno) for n in names if n.startswith("librarian.")}
    return out


def violations(files: list[Path], root: Path = PACKAGE) -> list[str]:
    bad = []
    for path in files:
        src = part_of(path, root)
        if src == "__init__":
            continue
        for dst, line in sorted(imported_parts(path)):
            if dst != src and RANK.get(dst, 99) >= RANK[src]:
                bad.append(f"{path.relative_to(root.parent)}:{line}: {src} imports {dst}")
    return bad


def test_every_part_has_a_rank():
    parts = {part_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert parts <= set(RANK), f"give these a layer in RANK: {sorted(parts - set(RANK))}"


def test_no_lower_layer_imports_a_higher_one():
    assert violations(sorted(PACKAGE.rglob("*.py"))) == []


def test_app_never_imports_a_pipeline():
    """The user-facing tools use library code (`online`, ...) only, never a pipeline's module."""
    app = sorted((PACKAGE / "app").rglob("*.py"))
    assert app and [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in app for dst, line in sorted(imported_parts(p))
                    if dst == "pipelines"] == []


def test_the_checker_catches_an_upward_import(tmp_path):
    root = tmp_path / "librarian"
    (root / "workspace").mkdir(parents=True)
    bad = root / "workspace" / "probe.py"
    bad.write_text("from librarian.pipelines import demo\nfrom librarian.workspace import ops\n", encoding="utf-8")
    assert violations([bad], root) == ["librarian/workspace/probe.py:1: workspace imports pipelines"]


@pytest.mark.parametrize("name", ["import librarian.cluster.topology", "from librarian.app import ask"])
def test_imports_of_both_forms_are_seen(tmp_path, name):
    f = tmp_path / "m.py"
    f.write_text(name + "\n", encoding="utf-8")
    assert {p for p, _ in imported_parts(f)} == {name.split()[1].split(".")[1]}


def test_architecture_doc_lists_every_part_at_its_rank():
    """docs/architecture.md's layer table: every part, at its RANK, layers in order."""
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1:3] for line in doc.splitlines() if line.startswith("| ") and line[2].isdigit()]
    table = [(name.strip("` "), int(layer)) for layer, parts in rows for name in parts.split(",")]
    assert [layer for _, layer in table] == sorted(layer for _, layer in table)
    assert dict(table) == RANK and len(table) == len(RANK)
