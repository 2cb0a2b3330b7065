"""What `ask` (and `serve`'s questions) are: the question (`AskItem`) and how it is answered (`AskConfig`).

Readers: `kbgym` (search / read(id) / answer), `librarian` (the Librarian
answerer: list / read(path) / answer), `jam` (the JAM researcher: open /
hybrid search / browse in rounds, then finalize), or `auto` (the workspace
decides: `readers.default_reader`). `DEFAULT_BACKEND` is each reader's
backend when `AskConfig.backend` names none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

READERS = ("auto", "kbgym", "librarian", "jam")
DEFAULT_BACKEND = {"kbgym": ("scripted", {"policy": "kbgym_reader"}), "librarian": ("hf", {"model": "smollm2"}),
                   "jam": ("scripted", {"policy": "jam_researcher"})}


@dataclass
class AskConfig:
    """How questions are answered."""

    reader: str = "auto"  # auto: `default_reader` of the workspace
    backend: str | None = None  # default per reader (DEFAULT_BACKEND)
    backend_args: dict[str, Any] = field(default_factory=dict)
    budget: int | None = None  # the role's budget when None
    batch: int = 32  # episodes generated together
    max_new_tokens: int = 256
    search_mode: str = "bm25"
    llm_researcher: bool = False  # jam + a model backend: the model runs the tools (else it writes the answer)


@dataclass(frozen=True, slots=True)
class AskItem:
    """One question to answer, with gold answers when the source has them."""

    id: str
    question: str
    answers: tuple[str, ...] = ()
    metric: str = "squad_f1"
    split: str = ""
    extra: dict[str, str] = field(default_factory=dict, compare=False)
