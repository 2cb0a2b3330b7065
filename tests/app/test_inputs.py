"""Inputs a user will have: links out of the folder, bad names, binary and unsupported files, huge files.

Nothing outside the corpus folder is read, no file aborts a build, and every
file left out is counted and listed in the build summary and results.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from librarian.app.build import BuildConfig, run
from librarian.cli import main as cli
from librarian.workspace import codec
from librarian.workspace.folder_io import scan_folder, split_sections

SECRET = "root-secret-line-0xC0FFEE"
# the reasons a build summary gives for a file it left out
LINK_OUTSIDE, LINK_NOT_FOLLOWED = "symlink outside the folder", "symlink (not followed without --follow-symlinks)"
BAD_NAME, UNSUPPORTED, PDF, BINARY = "bad name", "unsupported extension", "PDF (convert it to text first)", "binary"
NOT_UTF8, NOT_A_FILE, HIDDEN = "not UTF-8 text", "not a regular file", "hidden"


@pytest.fixture()
def messy(tmp_path: Path) -> Path:
    """A notes folder with what real folders hold besides notes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd.md").write_text(f"{SECRET}\n", encoding="utf-8")
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("Ada Moss met Ben Hale in Lisbon.\n", encoding="utf-8")
    (root / "sub" / "b.md").write_text("Ben Hale and Ada Moss wrote the Lisbon plan.\n", encoding="utf-8")
    (root / "passwd.md").symlink_to(outside / "passwd.md")  # a link out of the folder
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to(root / "a.md")  # a link that stays inside
    (root / "inside").symlink_to(root / "sub", target_is_directory=True)
    (root / "back\\slash.md").write_text("a name the workspace cannot hold\n", encoding="utf-8")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (root / "paper.pdf").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    (root / "fake.md").write_bytes(b"%PDF-1.7 a PDF under a .md name")
    (root / "blob.txt").write_bytes(bytes(range(1, 32)) * 20)
    (root / "latin.txt").write_bytes("café".encode("latin-1"))
    os.mkfifo(root / "pipe.md")  # reading it would block forever
    (root / ".git").mkdir()
    (root / ".git" / "config.md").write_text(f"{SECRET}\n", encoding="utf-8")
    (root / "config.md").symlink_to(root / ".git" / "config.md")  # inside, but into a hidden folder
    return root


def _reasons(results: dict) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in results["skipped"]}


def test_build_reads_nothing_outside_the_folder_and_lists_every_file_it_left_out(
        messy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ws"
    assert cli(["build", str(messy), "--out", str(out), "--embedder", "none"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert _reasons(results) == {
        "passwd.md": LINK_OUTSIDE, "escape": LINK_OUTSIDE, "alias.md": LINK_NOT_FOLLOWED,
        "inside": LINK_NOT_FOLLOWED, "back\\slash.md": BAD_NAME, "photo.png": UNSUPPORTED, "paper.pdf": PDF,
        "fake.md": PDF, "blob.txt": BINARY, "latin.txt": NOT_UTF8, "pipe.md": NOT_A_FILE, ".git/": HIDDEN,
        "config.md": HIDDEN,
    }
    assert sum(results["skipped_counts"].values()) == 13 and results["skipped_counts"][LINK_OUTSIDE] == 2
    printed = capsys.readouterr().out
    assert "skipped 13 file(s)" in printed and "passwd.md: symlink outside the folder" in printed
    assert "back\\slash.md: bad name" in printed
    # the secret is nowhere: not in the snapshot, the index, or the export
    nodes, _ = codec.read_parquet(out / "snapshot.parquet")
    assert sorted(n.path for n in nodes if n.kind == "raw") == ["a.md", "sub/b.md"]
    for file in out.rglob("*"):
        if file.is_file():
            assert SECRET.encode() not in file.read_bytes(), file


def test_follow_symlinks_takes_links_that_stay_inside_only(messy: Path, tmp_path: Path) -> None:
    results = run(BuildConfig(corpus=str(messy), out_dir=str(tmp_path / "ws"), embedder="none",
                              follow_symlinks=True))
    reasons = _reasons(results)
    assert reasons["passwd.md"] == reasons["escape"] == LINK_OUTSIDE and reasons["config.md"] == HIDDEN
    assert "alias.md" not in reasons and "inside" not in reasons
    nodes, _ = codec.read_parquet(tmp_path / "ws" / "snapshot.parquet")
    raw = {n.path: n.text for n in nodes if n.kind == "raw"}
    assert set(raw) == {"a.md", "alias.md", "inside/b.md", "sub/b.md"} and raw["alias.md"] == raw["a.md"]
    assert all(SECRET not in text for text in raw.values())


def test_a_link_loop_inside_the_folder_ends(tmp_path: Path) -> None:
    (tmp_path / "n" / "d").mkdir(parents=True)
    (tmp_path / "n" / "d" / "x.md").write_text("x\n", encoding="utf-8")
    (tmp_path / "n" / "d" / "again").symlink_to(tmp_path / "n", target_is_directory=True)
    scan = scan_folder(tmp_path / "n", follow_symlinks=True)
    assert [d.path for d in scan.documents] == ["d/x.md"] and [s.path for s in scan.skipped] == ["d/again"]


def test_unreadable_files_are_skipped_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ok.md").write_text("fine\n", encoding="utf-8")
    (tmp_path / "locked.md").write_text("locked\n", encoding="utf-8")
    real = Path.read_text

    def deny(self: Path, *args, **kwargs):  # the tests run as root, so chmod cannot make a file unreadable
        if self.name == "locked.md":
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", deny)
    scan = scan_folder(tmp_path)
    assert [d.path for d in scan.documents] == ["ok.md"]
    assert [(s.path, s.reason, s.detail) for s in scan.skipped] == [("locked.md", "unreadable", "Permission denied")]


def test_a_folder_with_nothing_usable_names_what_it_left_out(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "scan.pdf").write_bytes(b"%PDF-1.4")
    assert cli(["build", str(tmp_path / "c"), "--out", str(tmp_path / "o")]) == 2
    assert "holds no documents (1 file(s) left out: scan.pdf: PDF" in capsys.readouterr().err


def _long_markdown(sections: int, para: int = 6) -> str:
    parts = []
    for s in range(sections):
        parts.append(f"# Part {s}\n\n")
        for p in range(para):
            parts.append(f"Paragraph {p} of part {s}: " + "words and more words " * (5 + (s + p) % 7) + "\n")
            parts.append("a second line of the paragraph\n\n")
    return "".join(parts)


@pytest.mark.parametrize("max_chars", [300, 2_000, 8_000])
def test_sections_are_bounded_cover_every_line_and_cut_at_headings_first(max_chars: int) -> None:
    text = _long_markdown(60) + "x" * (max_chars * 2 + 5) + "\nlast line\n"
    sections = list(split_sections(text.splitlines(keepends=True), max_chars))
    assert "".join(s.text for s in sections) == text
    assert all(len(s.text) <= max_chars for s in sections)
    lines = text.splitlines(keepends=True)
    assert [s.first for s in sections][0] == 1 and sections[-1].last == len(lines)
    for a, b in zip(sections, sections[1:], strict=False):
        assert b.first in (a.last, a.last + 1)  # consecutive (a very long line is cut within itself)
    for s in sections:
        if s.first < s.last or len(lines[s.first - 1]) <= max_chars:
            assert "".join(lines[s.first - 1:s.last]) == s.text  # the origin's line range is exact
    starts = [lines[s.first - 1] for s in sections if s.first > 1 and len(lines[s.first - 1]) <= max_chars]
    at_heading = sum(1 for line in starts if line.startswith("# "))
    if max_chars >= 2_000:  # sections are larger than a part: most cuts fall on a heading
        assert at_heading >= 0.8 * len(starts)


def test_a_huge_file_becomes_sections_with_file_and_line_provenance(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    text = _long_markdown(2_500)  # about 3 MB
    lines = text.splitlines(keepends=True)
    fact_line = len(lines) // 2
    lines[fact_line - 1] = "The launch code of Project Heron is amber-seven.\n"
    lines[100] = "minified " * 1_000 + "\n"  # one line over two sections long
    (notes / "big.md").write_text("".join(lines), encoding="utf-8")
    (notes / "small.md").write_text("Project Heron is owned by Ada Moss.\n", encoding="utf-8")
    out = tmp_path / "ws"
    results = run(BuildConfig(corpus=str(notes), out_dir=str(out), embedder="hashing", section_chars=4_000))
    assert results["split_files"]["big.md"] == results["docs"] - 1 > 1_000
    err = capsys.readouterr().err  # the long phases show their progress
    assert "embedding (hashing-64): 100%" in err and "exporting: 100%" in err
    nodes, _ = codec.read_parquet(out / "snapshot.parquet")
    sections = sorted((n for n in nodes if n.kind == "raw" and n.path.startswith("big.md/")), key=lambda n: n.path)
    assert all(len(n.text) <= 4_000 for n in sections)
    assert "".join(n.text for n in sections) == "".join(lines)
    for n in sections:  # origin big.md#L<first>-L<last>, and those lines are the section's text
        first, last = (int(x) for x in n.origin.split("#L")[1].split("-L"))
        assert n.origin.startswith("big.md#L")
        assert n.text in lines[100] if first == last == 101 else "".join(lines[first - 1:last]) == n.text
    assert [n.path for n in sections if n.origin == "big.md#L101-L101"] == [
        f"big.md/lines-000101-000101-part{k:03d}.md" for k in (1, 2, 3)]
    (out / "q.txt").write_text("What is the launch code of Project Heron?\n", encoding="utf-8")
    assert cli(["ask", str(out), "--questions", str(out / "q.txt"), "--jsonl", str(out / "a.jsonl")]) == 0
    rec = json.loads((out / "a.jsonl").read_text())
    hit = [p for p in rec["passages"] if "amber-seven" in p["text"]]
    assert hit and hit[0]["file"] == "big.md" and hit[0]["file_line"] == fact_line
    assert "big.md" in rec["source_files"]


def test_entities_merge_aliases_skip_calendar_and_label_words_and_export_markdown(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "one.md").write_text("Attendees: Ada Lovelace, Ben Okafor\nIn May we met in Porto.\n", encoding="utf-8")
    (notes / "two.md").write_text("Attendees: Ben Okafor\nNotes from June: Ada presented; Porto next.\n",
                                  encoding="utf-8")
    (notes / "three.md").write_text("Owner: Ada Lovelace\nMay and June were busy for Ada.\n", encoding="utf-8")
    out = tmp_path / "ws"
    run(BuildConfig(corpus=str(notes), out_dir=str(out), embedder="none"))
    nodes, _ = codec.read_parquet(out / "snapshot.parquet")
    entities = {n.path: n for n in nodes if n.path.startswith("entities")}
    assert set(entities) == {"entities", "entities/ada-lovelace.md", "entities/ben-okafor.md", "entities/porto.md"}
    assert entities["entities/ada-lovelace.md"].provenance == ("one.md", "three.md", "two.md")
    exported = sorted(p.name for p in (out / "export" / "entities").iterdir())
    assert exported == ["README.md", "ada-lovelace.md", "ben-okafor.md", "porto.md"]
