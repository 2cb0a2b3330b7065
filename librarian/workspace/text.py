"""What text an op may store, and how stored text is made safe for a terminal.

Stored text must be valid Unicode that encodes as UTF-8 (no lone surrogates:
they would make the snapshot unsavable) and free of C0/C1 control characters
(ANSI escapes, bells, backspaces, a carriage return that rewrites a line)
and of invisible format characters (bidi embeddings, overrides and isolates
U+202A-202E, U+2066-2069, marks U+200E-200F; zero-width U+200B-200D,
U+2060-2064; the byte-order mark U+FEFF): they make text read differently
from what it holds.
Newline and tab are allowed in text, and so is a carriage return directly
before a newline (Windows line ends). Ids, paths and other names allow no
control character at all. Raw documents read from a corpus are stored as they
are, so everything printed to a terminal goes through `terminal_safe`.
"""

from __future__ import annotations

import re
import unicodedata

from librarian.workspace.errors import WorkspaceError

_SURROGATE = re.compile(r"[\ud800-\udfff]")
_INVISIBLE = "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"  # zero-width, bidi, BOM
# C0 controls except tab and newline, a CR not followed by LF, DEL, C1 controls, invisible format characters
_TEXT_CONTROL = re.compile(f"[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f{_INVISIBLE}]|\\r(?!\\n)")
_NAME_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_INVISIBLE}]")
_TERMINAL_UNSAFE = re.compile(f"[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f\\ud800-\\udfff{_INVISIBLE}]|\\r(?!\\n)")


def _reject_surrogates(value: str, what: str) -> None:
    found = _SURROGATE.search(value)
    if found is not None:
        raise WorkspaceError(f"{what} holds a lone surrogate {found.group()!r} at character {found.start()}: "
                             "it is not valid Unicode and cannot be saved as UTF-8; send the full character")


def check_text(value: str, what: str) -> str:
    """`value` if it may be stored as a node's text, else a `WorkspaceError` naming the character."""
    _reject_surrogates(value, what)
    found = _TEXT_CONTROL.search(value)
    if found is not None:
        raise WorkspaceError(f"{what} holds {_named(found.group())} at character "
                             f"{found.start()}; text may contain newlines and tabs but no other control characters "
                             "(ANSI escapes, bells, bidi overrides, zero-width characters and the like are refused)")
    return value


def check_name(value: str, what: str) -> str:
    """`value` if it may be used as an id, path or reference (no control character at all)."""
    _reject_surrogates(value, what)
    found = _NAME_CONTROL.search(value)
    if found is not None:
        raise WorkspaceError(f"{what} {value[:80]!r} holds {_named(found.group())}; ids and paths are plain text")
    return value


def _named(ch: str) -> str:
    """A refused character as an error names it: "the control character '\\x1b'", or "the invisible format
    character U+202E (RIGHT-TO-LEFT OVERRIDE)"."""
    if ord(ch) < 0xA0:
        return f"the control character {ch!r}"
    return f"the invisible format character U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')})"


def terminal_safe(text: str) -> str:
    """`text` with every control character a terminal would act on, every invisible format character and every
    lone surrogate shown escaped.

    Newlines, tabs and CR-LF line ends are kept; `"\\x1b[31m"` prints as the
    six characters `\\x1b[31m`, never as a colour change, and U+202E as `\\u202e`.
    """
    if not _TERMINAL_UNSAFE.search(text):
        return text
    return _TERMINAL_UNSAFE.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)
