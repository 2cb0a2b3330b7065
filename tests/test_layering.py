"""The layering of docs/architecture.md (its "Layers" table): a lower layer never imports a higher one (checked on
every module's imports), and a few parts stay apart though their ranks would allow an import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "librarian"
# rank of each top-level part of the package; a part may import only parts of strictly lower rank
RANK = {
    "config": 0, "workspace": 0, "redact": 0,
    "datasets": 1, "search": 1, "models": 1, "tracking": 1,
    "roles": 2, "rewards": 3, "answering": 3, "learner": 4, "evaluation": 5, "cluster": 6, "planning": 7, "rl": 8,
    "online": 8, "pipelines": 9, "app": 10, "cli": 11,
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


def module_of(path: Path, root: Path = PACKAGE) -> str:
    """`librarian.x.y` for x/y.py, `librarian.x` for x/__init__.py."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, root: Path) -> bool:
    rel = Path(*name.split(".")[1:])
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def module_imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """The package's modules a file imports at module level (not in functions, not under TYPE_CHECKING):
    `from librarian.x import y` is module `librarian.x.y` when y is a submodule, else `librarian.x`."""
    body, out = list(ast.parse(path.read_text(encoding="utf-8")).body), set()
    while body:
        node = body.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            body += node.body + node.orelse
        elif isinstance(node, ast.Try):
            body += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == root.name}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] == root.name:
            subs = {f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}", root)}
            out |= subs | ({node.module} if len(subs) < len(node.names) else set())
    return out


def import_cycle(files: list[Path], root: Path = PACKAGE) -> list[str]:
    """A circle of module-level imports (`[a, b, a]`: a imports b imports a), else []."""
    graph = {module_of(p, root): sorted(module_imports(p, root)) for p in files}
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str]:
        path.append(module)
        for nxt in graph.get(module, []):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done and (found := visit(nxt)):
                return found
        done.add(path.pop())
        return []

    for module in sorted(graph):
        if module not in done and (found := visit(module)):
            return found
    return []


def test_every_part_has_a_rank():
    parts = {part_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert parts <= set(RANK), f"give these a layer in RANK: {sorted(parts - set(RANK))}"


def test_no_lower_layer_imports_a_higher_one():
    assert violations(sorted(PACKAGE.rglob("*.py"))) == []


def imports_of(src: str, dst: str, root: Path = PACKAGE) -> list[str]:
    """`file:line` of every import of part `dst` in part `src`'s files."""
    files = sorted((root / src).rglob("*.py"))
    assert files, f"no files in part {src!r}"
    return [f"{p.relative_to(root.parent)}:{line}" for p in files for part, line in sorted(imported_parts(p))
            if part == dst]


def test_app_never_imports_a_pipeline():
    """The user-facing tools use library code (`online`, ...) only, never a pipeline's module."""
    assert imports_of("app", "pipelines") == []


def test_cluster_never_imports_evaluation():
    """Ray's actors need nothing of the evaluation (what a rollout worker searches with lives in `roles`)."""
    assert imports_of("cluster", "evaluation") == []


def test_the_apart_check_catches_an_import(tmp_path):
    root = tmp_path / "librarian"
    (root / "cluster").mkdir(parents=True)
    (root / "cluster" / "w.py").write_text("import os\nfrom librarian.evaluation.memory_arms import x\n",
                                           encoding="utf-8")
    assert imports_of("cluster", "evaluation", root) == ["librarian/cluster/w.py:2"]


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
    layers_section = doc.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in layers_section.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    table = [(name.strip("` "), int(layer)) for layer, parts in rows for name in parts.split(",")]
    assert [layer for _, layer in table] == sorted(layer for _, layer in table)
    assert dict(table) == RANK and len(table) == len(RANK)


def test_no_import_circle():
    """Module-level imports form no circle (a circle is fixed in the design, not by a function-level import)."""
    cycle = import_cycle(sorted(PACKAGE.rglob("*.py")))
    assert cycle == [], "import circle: " + " -> ".join(cycle)


def test_the_checker_catches_an_import_circle(tmp_path):
    root = tmp_path / "librarian"
    (root / "roles").mkdir(parents=True)
    files = {"roles/__init__.py": "from librarian.roles.episode import run_episode\n",
             "roles/episode.py": "from librarian.roles import tools\n\ndef run_episode():\n    import os\n",
             "roles/tools.py": "import librarian.roles.helpers\n",
             "roles/helpers.py": "from librarian.roles import episode\n",
             "roles/lazy.py": "def f():\n    from librarian.roles import helpers\n"}
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    paths = sorted(root.rglob("*.py"))
    assert module_imports(root / "roles" / "__init__.py", root) == {"librarian.roles.episode"}
    assert module_imports(root / "roles" / "lazy.py", root) == set()
    assert import_cycle(paths, root) == ["librarian.roles.episode", "librarian.roles.tools",
                                         "librarian.roles.helpers", "librarian.roles.episode"]
    (root / "roles" / "helpers.py").write_text("from librarian.roles.lazy import f\n", encoding="utf-8")
    assert import_cycle(paths, root) == []
