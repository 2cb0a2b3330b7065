"""Which reader answers over a workspace, and its role.

`default_reader` (the `auto` reader): `kbgym` on a KBGym/PhantomWiki fact
store (built by `kbgym_keys`, or from a `librarian data` folder), `jam` (the
researcher, which reads any text) on anything else, such as a folder of
notes. `make_role` is the reader's role; `writes_answers` says whether a
model writes the answer from the passages the researcher found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from librarian.answering.config import READERS, AskConfig
from librarian.config import InputError
from librarian.roles import kbgym_reader, librarian_answerer
from librarian.roles.definitions import Role, jam_researcher

FACT_BUILDERS = ("kbgym_keys",)  # a store built by these answers KBGym-style questions


class BuiltWorkspace(Protocol):
    """A workspace opened to be read (`app.workspace_dir.OpenedWorkspace`): its nodes, its search index (None
    when none was saved), its build's `workspace.json` and where its snapshot is."""

    source: Any  # a NodeSource
    index: Any  # a SearchIndex, or None
    manifest: dict[str, Any]
    snapshot_path: Path


def default_reader(opened: BuiltWorkspace) -> str:
    """`kbgym` for a KBGym/PhantomWiki fact store (built by `kbgym_keys`, or from a `librarian data` folder),
    `jam` (the researcher, which reads any text) otherwise."""
    by_manifest = reader_of_manifest(opened.manifest)
    if by_manifest is not None:
        return by_manifest
    raw = [n.path for n in opened.source if n.kind == "raw"]  # a build without the record: facts live in facts/
    return "kbgym" if raw and all(p.startswith("facts/") for p in raw) else "jam"


def reader_of_manifest(manifest: dict[str, Any]) -> str | None:
    """The default reader a build's `workspace.json` decides, or None when it does not record enough."""
    if manifest.get("builder") in FACT_BUILDERS or manifest.get("corpus_kind") == "dataset":
        return "kbgym"
    return "jam" if "corpus_kind" in manifest else None


def resolve_reader(reader: str, opened: BuiltWorkspace) -> str:
    """`reader`, or the workspace's default reader for `auto`."""
    return default_reader(opened) if reader == "auto" else reader


def writes_answers(cfg: AskConfig, reader: str) -> bool:
    """Whether the researcher finds passages and a model backend writes the answer from them."""
    return reader == "jam" and cfg.backend not in (None, "scripted") and not cfg.llm_researcher


def make_role(reader: str, budget: int | None) -> Role:
    """The reader role for `--reader`."""
    if reader == "kbgym":
        return kbgym_reader() if budget is None else kbgym_reader(budget=budget)
    if reader == "librarian":
        return librarian_answerer() if budget is None else librarian_answerer(budget=budget)
    if reader == "jam":
        return jam_researcher() if budget is None else jam_researcher(budget=budget)
    raise InputError(f"unknown reader {reader!r}; choose one of {', '.join(READERS)}")
