"""The HTML report and the viewer: jinja2 templates that show every value as text, never as markup."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

from librarian.app.viewer import render_html
from librarian.evaluation.report import write_report

EVIL = '<script>alert("x")</script>'


class _Tags(HTMLParser):
    """Collects start tags and the text of every element."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


def test_report_escapes_names_notes_and_config_and_inlines_plots(tmp_path) -> None:
    png = tmp_path / "rho.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    rows = [{"name": EVIL, "n": 3, "f1": 0.5, "rho_ci": [0.1, 0.9]}]
    page = write_report(tmp_path / "r" / "report.html", f"title {EVIL}", rows, [png, tmp_path / "gone.png"],
                        notes=[f"note {EVIL}"], extra={"k": EVIL}, config={"out_dir": EVIL}).read_text()
    parsed = _parse(page)
    assert "script" not in parsed.tags  # the report has no script of its own; none may be injected
    text = "".join(parsed.text)
    assert text.count('<script>alert("x")</script>') == 4  # <title>, <h1>, the table cell, the note: as text
    assert "0.500" in text and "[0.100, 0.900]" in text
    assert "plot gone.png was not written" in text
    assert 'src="data:image/png;base64,iVBORw0KGgpmYWtl"' in page
    assert json.dumps({"out_dir": EVIL}, indent=1) in text and "<title>title &lt;script&gt;" in page


def test_viewer_data_cannot_end_its_script_block_and_round_trips() -> None:
    records = [{"id": "a", "path": f"notes/{EVIL}", "parent": "notes", "kind": "raw", "text": "x </script> & é",
                "links": [], "provenance": []}]
    page = render_html(f"t {EVIL}", "sub", records, [("coverage", "1%")])
    assert page.count("</script>") == 2 and "<title>t &lt;script&gt;" in page
    block = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    data = json.loads(block)
    assert data["nodes"] == records and data["title"] == f"t {EVIL}" and data["stats_rows"] == [["coverage", "1%"]]
    assert "ul.tree{list-style:none" in page and "JSON.parse(document.getElementById" in page  # assets unescaped
