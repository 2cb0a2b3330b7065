"""`librarian rollback WORKSPACE VERSION`: serve an earlier version of a workspace curated online.

Moves `WORKSPACE/online/HEAD.json` to VERSION (0 is the build itself) and
records the rollback in the curation log. A running `serve --curate` picks it
up within a second; later rounds curate from it, and the versions after it
stay on disk (roll forward the same way). `--list` shows every version:
parent, ops, snapshot hash, when, and why it was swapped in.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from librarian.online.versions import VersionStore
from librarian.online.workspace import rollback_folder
from librarian.workspace.errors import WorkspaceError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="librarian rollback", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workspace", help="a build folder served with `librarian serve --curate`")
    p.add_argument("version", nargs="?", type=int, help="the version to serve (0: the build)")
    p.add_argument("--list", action="store_true", help="list the versions and exit")
    p.add_argument("--reason", default="", help="why (kept in the curation log)")
    return p


def listing(store: VersionStore) -> str:
    """One line per version, the served one marked with `*`."""
    head = store.head()
    lines = []
    for v in store.numbers():
        info = store.info(v)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["created"])) if "created" in info else "-"
        lines.append(f"{'*' if v == head else ' '} {v:>5}  parent {str(info.get('parent', '-')):>5}  "
                     f"ops {info.get('ops', 0):>4}  {when}  {str(info.get('snapshot_hash', ''))[:12]}  "
                     f"{info.get('reason', '')}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """CLI entry."""
    args = parser().parse_args(list(argv))
    try:
        store = VersionStore(args.workspace)
        if args.list or args.version is None:
            if args.version is None and not args.list:
                raise WorkspaceError("give the VERSION to serve, or --list to see them")
            print(listing(store))
            return 0
        before = rollback_folder(args.workspace, args.version, args.reason)
    except WorkspaceError as exc:
        print(f"librarian rollback: {exc}", file=sys.stderr)
        return 2
    print(f"{args.workspace}: serving version {args.version} (was {before})")
    return 0
