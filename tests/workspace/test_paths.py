"""Path and id rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from librarian.workspace import WorkspaceError
from librarian.workspace.paths import ancestors, is_within, normalize_path, parent_of, validate_id


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("a/b", "a/b"), ("./a//b/", "a/b"), (" a / b ", "a/b"), ("", ""), (".", ""), ("ü/ß.md", "ü/ß.md")],
)
def test_normalize_path_accepts_and_canonicalises(raw: str, expected: str) -> None:
    assert normalize_path(raw) == expected


@pytest.mark.parametrize(
    ("raw", "why"),
    [("../x", r"\.\."), ("a/../../x", r"\.\."), ("/etc/passwd", "absolute"), ("~/x", "absolute"),
     ("a\\b", "backslash"), ("a\x00b", "control"), ("a\nb", "control"), ("x" * 300, "longer"), (3, "string")],
)
def test_normalize_path_rejects_escapes_and_junk(raw: object, why: str) -> None:
    with pytest.raises(WorkspaceError, match=why):
        normalize_path(raw)


@given(st.text(max_size=60))
def test_normalized_paths_are_fixed_points_that_never_escape(raw: str) -> None:
    try:
        path = normalize_path(raw)
    except WorkspaceError:
        return
    assert normalize_path(path) == path
    assert not path.startswith("/") and ".." not in path.split("/")


def test_path_helpers() -> None:
    assert parent_of("a/b/c") == "a/b" and parent_of("a") == ""
    assert ancestors("a/b/c") == ["a", "a/b"]
    assert is_within("a/b", "a") and not is_within("ab", "a") and is_within("x", "")


@pytest.mark.parametrize("bad", ["", " x", "x ", "a\tb", 5, None])
def test_validate_id_rejects_unusable_ids(bad: object) -> None:
    with pytest.raises(WorkspaceError):
        validate_id(bad)
