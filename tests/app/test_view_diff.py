"""`librarian view` and `librarian diff`: the diff itself, self-contained HTML, and a real headless browser."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from librarian.app.diff import diff_html, diff_snapshots, diff_text
from librarian.app.viewer import view_html
from librarian.cli import main as cli
from librarian.workspace import Add, Document, Edit, Link, Move, SnapshotView, Workspace, codec

from .cdp import Browser
from .conftest import ARTIFACTS


def _pair() -> tuple[Workspace, Workspace]:
    a = Workspace.from_documents([Document("r1", "Ada lives in Lisbon."), Document("r2", "Ben lives in Porto.")])
    a.apply(Add("Lisbon people", path="idx/lisbon", links=("r1",)))
    a.apply(Add("old note", path="notes/old"))
    b = a.copy()
    b.apply(Edit("idx/lisbon", "People in Lisbon"))
    b.apply(Link("idx/lisbon", "r2"))
    b.apply(Move("notes/old", "notes/older"))
    b.apply(Add("Porto people", path="idx/porto", provenance=("r2",)))
    return a, b


def test_diff_classifies_every_change() -> None:
    a, b = _pair()
    d = diff_snapshots(a, b)
    assert [n.path for n in d.added] == ["idx/porto"] and not d.removed
    status = {c.path: c.status for c in d.changed}
    assert status == {"idx/lisbon": "edited", "notes/older": "moved"}
    lisbon = next(c for c in d.changed if c.path == "idx/lisbon")
    assert lisbon.links_added == ("r2",) and lisbon.describe() == "text edited (+3 chars); links +1"
    back = diff_snapshots(b, a)
    assert [n.path for n in back.removed] == ["idx/porto"] and back.counts()["links_removed"] == 1
    assert diff_snapshots(a, a).empty
    text = diff_text(d, "A", "B")
    assert text.splitlines()[0] == "diff A -> B: 1 added, 0 removed, 1 edited, 1 moved, 0 relinked; links +1 -0"
    assert "+ idx/porto  [synthetic]" in text and "~ notes/older  moved from notes/old" in text


def test_viewer_is_self_contained_and_escapes_text() -> None:
    ws = Workspace.from_documents([Document("r1", "a </script><script>alert(1)</script> b")])
    page = view_html(ws, "t")
    assert page.count("</script>") == 2  # only the page's own data and code blocks
    assert not re.search(r"""(src|href)=["']?https?:""", page) and "@import" not in page
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
                      .group(1).replace("<\\/", "</"))
    assert data["nodes"][-1]["text"].startswith("a </script>")


def test_cli_view_and_diff_write_their_files(built200: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The counts are taken from the snapshots themselves, not from the commands' output."""
    initial = {n.id: n for n in codec.read_parquet(built200 / "initial.parquet")[0] if n.active}
    built = {n.id: n for n in codec.read_parquet(built200 / "snapshot.parquet")[0] if n.active}
    synthetic = sum(1 for n in built.values() if n.kind == "synthetic")
    added = len(built.keys() - initial.keys())
    assert synthetic > 0 and added > synthetic  # index documents, and the folders that hold them
    assert cli(["view", str(built200), "--out", str(tmp_path / "v")]) == 0
    results = json.loads((tmp_path / "v/results.json").read_text())
    assert results["structure"]["synthetic"] == synthetic and (tmp_path / "v/viewer.html").is_file()
    page = (tmp_path / "v/viewer.html").read_text(encoding="utf-8")
    assert all(json.dumps(n.path) in page for n in list(built.values())[:50])  # the nodes are in the page
    assert cli(["diff", str(built200 / "initial.parquet"), str(built200), "--out", str(tmp_path / "d")]) == 0
    diff = json.loads((tmp_path / "d/results.json").read_text())
    assert diff["added"] == added and diff["removed"] == len(initial.keys() - built.keys()) == 0
    assert f"{added} added" in capsys.readouterr().out
    assert cli(["view", str(tmp_path / "missing")]) == 2


@pytest.mark.slow
def test_browser_opens_viewer_clicks_a_node_and_sees_provenance(built200: Path, tmp_path: Path) -> None:
    page = tmp_path / "viewer.html"
    page.write_text(view_html(SnapshotView.from_parquet(built200 / "snapshot.parquet"), "kbgym"), encoding="utf-8")
    a, b = _pair()
    diff_page = tmp_path / "diff.html"

    diff_page.write_text(diff_html(a, b, diff_snapshots(a, b), "A", "B"), encoding="utf-8")
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(page.as_uri())
        assert browser.eval("document.getElementById('stats').innerText").count("coverage") == 2
        browser.click('#tree .item[title="indexes"]')  # a directory: its README shows
        assert browser.eval("document.getElementById('node-kind').textContent") == "directory"
        browser.click('#tree .item[title="indexes"] ~ .tw, #tree li:has(> .item[title="indexes"]) > .tw')
        browser.click('#tree li:has(> .item[title="indexes/city"]) > .tw')
        browser.click('#tree .item[title="indexes/city/port-avel"]')
        assert browser.eval("document.getElementById('node-path').textContent") == "indexes/city/port-avel"
        assert browser.eval("document.getElementById('node-kind').textContent") == "synthetic"
        chains = browser.eval("document.getElementById('provenance-paths').innerText")
        assert "indexes/city/port-avel → facts/" in " ".join(chains.split())
        shot = browser.screenshot(tmp_path / "viewer.png")
        browser.click("#provenance a.ref")  # follow provenance to a raw fact
        assert browser.eval("document.getElementById('node-kind').textContent") == "raw"
        assert "lives in Port Avel" in browser.eval("document.getElementById('node-text').textContent")
        browser.open(diff_page.as_uri())
        assert "1 added" in browser.eval("document.getElementById('diff').innerText")
        browser.click("#diff-edited a.ref")
        assert browser.eval("document.getElementById('node-change').textContent").startswith("text edited")
        diff_shot = browser.screenshot(tmp_path / "diff.png")
    finally:
        browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "viewer.png")
    shutil.copy(diff_shot, ARTIFACTS / "diff.png")
