"""The Librarian builder's task message, shared by `build`, the rollout workers and the untrained baseline."""

from __future__ import annotations

from librarian.workspace import Workspace, views


def build_task(ws: Workspace, listing_lines: int = 40) -> str:
    """The builder's task message: what the workspace holds, and the top of its listing."""
    listing = views.ls(ws, "").text.splitlines()
    more = [f"... ({len(listing) - listing_lines} more)"] if len(listing) > listing_lines else []
    return (f"The workspace holds {sum(1 for n in ws if n.kind == 'raw')} raw documents. "
            "Organise it for a reader with a small budget.\n" + "\n".join(listing[:listing_lines] + more))
