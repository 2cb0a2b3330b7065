"""One vocabulary (issue 45): every class name in `librarian/` is defined in one module only, so a name in a
traceback, a doc or a review means one thing. Nested classes count as well as top-level ones."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "librarian"

# name -> why it may be defined in more than one module (keep this empty where a rename can say what each is)
ALLOWED: dict[str, str] = {}


def class_definitions(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Class name -> `path:line` of every definition (top level or nested) under `root`."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                out[node.name].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return dict(out)


def duplicates(definitions: dict[str, list[str]]) -> dict[str, list[str]]:
    """The names defined more than once (in two modules, or twice in one), not allowed by `ALLOWED`."""
    return {name: places for name, places in sorted(definitions.items()) if len(places) > 1 and name not in ALLOWED}


def test_every_class_name_is_defined_once():
    found = duplicates(class_definitions())
    assert not found, "class names defined more than once (rename so each says what it is, or add to ALLOWED):\n" + (
        "\n".join(f"  {name}: {', '.join(places)}" for name, places in found.items()))


def test_allowed_names_are_still_duplicated():
    """An exception that no longer applies is removed, so `ALLOWED` lists only real ones."""
    definitions = class_definitions()
    assert [n for n in ALLOWED if len(definitions.get(n, [])) < 2] == []


def test_a_duplicate_is_found(tmp_path):
    pkg = tmp_path / "librarian"
    (pkg / "a").mkdir(parents=True)
    (pkg / "a" / "x.py").write_text("class Plan:\n    class Inner: ...\n")
    (pkg / "b.py").write_text("class Plan: ...\nclass Other:\n    class Inner: ...\n")
    assert duplicates(class_definitions(pkg)) == {"Inner": ["librarian/a/x.py:2", "librarian/b.py:3"],
                                                  "Plan": ["librarian/a/x.py:1", "librarian/b.py:1"]}
