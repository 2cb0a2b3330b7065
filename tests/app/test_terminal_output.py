"""`librarian ask` never sends a control character from the store to the terminal: a corpus file holding ANSI
escapes and a bell is read and quoted, and the escapes arrive as visible text."""

from __future__ import annotations

import io
from pathlib import Path

from librarian.app.ask import main as ask_main
from librarian.app.ask_printing import print_record
from librarian.app.build import main as build_main

CONTROLS = ("\x1b", "\x07", "\x9b", "\x08")


def test_ask_prints_stored_escapes_as_text(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ada.md").write_text("Ada Moss \x1b[31mflew\x1b[0m to Lisbon in May.\x07\n", encoding="utf-8")
    (notes / "ben.md").write_text("Ben Hale lives in Porto.\n", encoding="utf-8")
    assert build_main([str(notes), "--out", str(tmp_path / "ws"), "--embedder", "none"]) == 0
    capsys.readouterr()
    assert ask_main([str(tmp_path / "ws"), "Where did Ada Moss fly?", "--trace"]) == 0
    shown = capsys.readouterr().out
    assert "ada.md" in shown and "\\x1b[31mflew" in shown  # the file was read and quoted ...
    assert not [c for c in CONTROLS if c in shown]  # ... and nothing in it drives the terminal


def test_print_record_escapes_every_field() -> None:
    rec = {"question": "q\x1b[2J", "answer": "a\x1b]0;pwned\x07", "end": "done", "files_read": ["p\x08ath"],
           "actions": 1, "provenance": {"p\x08ath": [["p\x08ath", "raw\x1b[1m"]]}, "sources": ["s\x9b"],
           "sufficient": True, "trace": [{"calls": [{"name": "read", "arguments": {"path": "x\x1b"}}],
                                          "errors": [{"kind": "tool", "message": "bad \x1b[5m"}],
                                          "observation": "obs \x1b[31m\r overwritten"}]}
    out = io.StringIO()
    print_record(rec, with_trace=True, stream=out)
    text = out.getvalue()
    assert not [c for c in (*CONTROLS, "\r") if c in text]
    assert "a\\x1b]0;pwned\\x07" in text and "p\\x08ath" in text
