"""The demo's scripted curator: one index document per key a training question names.

Paper 001's curation skill, reduced to a program: for a key (a person, city,
job or hobby), page through search results for the key's name, keep the hits
that state it, and add an index document that links them ("an index points;
it does not list"). It uses only the question's keys and the search tool,
never the universe graph or a gold answer.
"""

from __future__ import annotations

from librarian.search.base import SearchIndex
from librarian.workspace import Add, LinkMany, Workspace, WorkspaceError
from librarian.workspace.ops import MAX_LINK_MANY_TARGETS

PAGE = 5
INDEXABLE_KINDS = ("person", "city", "job", "hobby")
TITLES = {"person": "{v}", "city": "Residents of {v}", "job": "People whose job is {v}",
          "hobby": "People whose hobby is {v}"}


def _slug(value: str) -> str:
    return "-".join("".join(ch if ch.isalnum() else " " for ch in value.lower()).split()) or "key"


def key_label(key: str) -> str:
    """The name part of a typed key ("city:Port Avel" -> "Port Avel")."""
    return key.split(":", 1)[1] if ":" in key else key


class KeyIndexer:
    """Builds at most one index document per key, through workspace ops only."""

    def __init__(self, ws: Workspace, index: SearchIndex, max_pages: int = 8) -> None:
        self.ws = ws
        self.index = index
        self.max_pages = max_pages
        self.built: list[str] = []
        self.done: set[str] = set()
        self.skipped = 0

    def members(self, name: str) -> list[str]:
        """Ids of raw facts that mention `name`, paging search until a page adds nothing."""
        found: list[str] = []
        needle = name.lower()
        for page in range(self.max_pages):
            hits = self.index.search(name, k=PAGE, offset=page * PAGE, mode="bm25", kinds=["raw"])
            new = [h.id for h in hits if needle in h.text.lower() and h.id not in found]
            found.extend(new)
            if len(hits) < PAGE or not new:
                break
        return found

    def index_key(self, key: str) -> str | None:
        """Add and fill the index document for `key`; returns its id, or None if skipped."""
        kind, _, value = key.partition(":")
        if key in self.done or kind not in INDEXABLE_KINDS or not value:
            return None
        self.done.add(key)
        members = self.members(value)
        if not members:
            self.skipped += 1
            return None
        try:
            title = TITLES[kind].format(v=value)
            node_id = self.ws.apply(Add(title, path=f"indexes/{kind}/{_slug(value)}")).created[-1]
            for start in range(0, len(members), MAX_LINK_MANY_TARGETS):
                self.ws.apply(LinkMany(node_id, tuple(members[start:start + MAX_LINK_MANY_TARGETS])))
        except WorkspaceError:
            self.skipped += 1
            return None
        self.built.append(node_id)
        return node_id
