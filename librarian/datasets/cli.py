"""`librarian data <name> [options] --out DIR`: generate or convert a dataset.

Writes `corpus.parquet`, `questions.parquet`, a dataset card `CARD.md` and
`results.json` into DIR. Unknown names or bad flags: a one-line error, exit 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq

from librarian.datasets.card import write_outputs
from librarian.datasets.kbgym import build_kbgym
from librarian.datasets.kbgym.gradient import gradient_groups
from librarian.datasets.kbgym.verify import verify
from librarian.datasets.loaders import LOADERS
from librarian.datasets.memorygym import MemoryGymConfig, build_memorygym
from librarian.datasets.phantomwiki import PWConfig, build_phantomwiki, convert
from librarian.datasets.records import Bundle, DatasetError, question_table

GENERATORS = ("kbgym", "phantomwiki", "memorygym")
log = logging.getLogger("librarian.data")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit code 2
        raise _UsageError(f"librarian data {self.prog.split()[-1]}: {message}")


class _UsageError(Exception):
    pass


def _parser(name: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"librarian data {name}", description=f"Write the {name} dataset as Parquet.")
    p.add_argument("--out", required=True, help="output folder")
    if name == "kbgym":
        p.add_argument("--people", type=int, default=500)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--gradient", type=int, default=0, metavar="N",
                       help="also write N questions per key-coverage gradient group (gradient.parquet)")
    elif name == "phantomwiki":
        p.add_argument("--num-family-trees", type=int, default=2)
        p.add_argument("--max-family-tree-size", type=int, default=25)
        p.add_argument("--num-questions-per-type", type=int, default=10)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--question-depth", type=int, default=None,
                       help="depth of PhantomWiki's question grammar (default: the generator's, 6)")
        p.add_argument("--paper-scale", action="store_true", help="16 trees, 60 questions per template")
        p.add_argument("--input", help="convert an existing PhantomWiki output folder instead of generating")
    elif name == "memorygym":
        p.add_argument("--speakers", type=int, default=6)
        p.add_argument("--sessions", type=int, default=40)
        p.add_argument("--seed", type=int, default=1)
    else:
        p.add_argument("--input", required=True, help="the benchmark's file or folder")
        if name == "browsecomp_plus":
            p.add_argument("--corpus", help="optional corpus file (.jsonl or .parquet)")
        if name == "bright":
            p.add_argument("--domains", help="comma-separated domains (default: all found)")
            p.add_argument("--answers", help="JSON {example id: reference answer}")
        if name == "hotpotqa":
            p.add_argument("--split", default="dev")
            p.add_argument("--shared", action="store_true", help="one store of distinct titles")
        if name == "narrativeqa":
            p.add_argument("--stories", action="store_true", help="also load tmp/<id>.content stories")
    return p


def _build(name: str, a: argparse.Namespace) -> tuple[Bundle, dict]:
    extra: dict = {}
    if name == "kbgym":
        kb = build_kbgym(a.people, a.seed)
        problems = verify(kb.corpus, kb.bundle.questions)
        if problems:
            raise DatasetError(f"gold check failed: {problems[0]} (and {len(problems) - 1} more)")
        extra["gold_check"] = "passed"
        if a.gradient:
            groups = gradient_groups(kb, n=a.gradient, seed=a.seed)

            Path(a.out).mkdir(parents=True, exist_ok=True)
            pq.write_table(question_table([q for g in groups.values() for q in g]), Path(a.out) / "gradient.parquet")
            extra["gradient_groups"] = {g: len(v) for g, v in groups.items()}
        return kb.bundle, extra
    if name == "phantomwiki":
        if a.input:
            return convert(a.input, seed=a.seed, config={"input": a.input}), extra
        cfg = PWConfig.paper_scale(a.seed) if a.paper_scale else PWConfig(
            a.num_family_trees, a.max_family_tree_size, a.seed, a.num_questions_per_type)
        if a.question_depth is not None:
            cfg = replace(cfg, question_depth=a.question_depth)
        return build_phantomwiki(Path(a.out), cfg), extra
    if name == "memorygym":
        return build_memorygym(MemoryGymConfig(speakers=a.speakers, sessions=a.sessions, seed=a.seed)), extra

    loader, _ = LOADERS[name]
    kwargs: dict = {}
    if name == "browsecomp_plus" and a.corpus:
        kwargs["corpus_path"] = a.corpus
    if name == "bright":
        kwargs["domains"] = a.domains.split(",") if a.domains else None
        kwargs["answers_path"] = a.answers
    if name == "hotpotqa":
        kwargs.update(split=a.split, shared=a.shared)
    if name == "narrativeqa":
        kwargs["stories"] = a.stories
    return loader(a.input, **kwargs), extra


def names() -> list[str]:
    return [*GENERATORS, *LOADERS]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `librarian data`; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    known = names()
    usage = f"usage: librarian data <{'|'.join(known)}> [options] --out DIR"
    if args and args[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not args:  # a missing dataset is a usage error, as argparse treats a missing argument
        print(f"{usage}\nlibrarian data: name a dataset", file=sys.stderr)
        return 2
    name = args[0]
    if name not in known:
        print(f"librarian data: unknown dataset {name!r}; choose one of {', '.join(known)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        a = _parser(name).parse_args(args[1:])
        t0 = time.perf_counter()
        log.info("building %s", name)
        bundle, extra = _build(name, a)
        extra["elapsed_s"] = round(time.perf_counter() - t0, 3)

        results = write_outputs(bundle, a.out, extra)
    except _UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except DatasetError as e:
        print(f"librarian data {name}: {e}", file=sys.stderr)
        return 2
    log.info("wrote %d docs and %d questions to %s", results["docs"], results["questions"], a.out)
    return 0
