"""Dataset cards (markdown: counts per class, split and template) and `results.json`."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from librarian.datasets.records import SCHEMA_VERSION, Bundle, write_parquet


def summary(bundle: Bundle) -> dict[str, object]:
    """Counts a person or a script compares between runs."""
    qs = bundle.questions
    return {
        "dataset": bundle.name,
        "schema_version": SCHEMA_VERSION,
        "docs": len(bundle.corpus),
        "collections": len({d.collection for d in bundle.corpus}),
        "questions": len(qs),
        "questions_by_split": bundle.splits(),
        "classes": len({q.qclass for q in qs}),
        "templates": len({q.template for q in qs}),
        "questions_by_class": dict(sorted(Counter(q.qclass for q in qs).items(), key=lambda kv: _natural(kv[0]))),
    }


def _natural(key: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def _table(rows: dict[str, Counter], splits: list[str], label: str) -> list[str]:
    lines = [f"| {label} | " + " | ".join(splits) + " | total |", "|---" * (len(splits) + 2) + "|"]
    for key in sorted(rows, key=_natural):
        c = rows[key]
        lines.append(f"| {key} | " + " | ".join(str(c.get(s, 0)) for s in splits) + f" | {sum(c.values())} |")
    return lines


def card_markdown(bundle: Bundle) -> str:
    """A markdown dataset card: what it is, its configuration and its counts."""
    s = summary(bundle)
    splits = list(bundle.splits())
    by_class: dict[str, Counter] = {}
    by_template: dict[str, Counter] = {}
    for q in bundle.questions:
        by_class.setdefault(q.qclass, Counter())[q.split] += 1
        by_template.setdefault(q.template, Counter())[q.split] += 1
    lines = [
        f"# Dataset card: {bundle.name}",
        "",
        f"- schema version: {SCHEMA_VERSION} (see docs/datasets.md)",
        f"- documents: {s['docs']} in {s['collections']} collection(s)",
        f"- questions: {s['questions']} over {s['classes']} classes and {s['templates']} templates",
        f"- configuration: `{json.dumps(bundle.config, sort_keys=True)}`",
        "",
        "## Questions per class and split",
        "",
        *_table(by_class, splits, "class"),
        "",
        "## Questions per template and split",
        "",
        *_table(by_template, splits, "template"),
        "",
        "## Files",
        "",
        "- `corpus.parquet`: one row per document (id, text, origin, collection, source, title, path, extra)",
        "- `questions.parquet`: one row per question (id, question, answers, split, qclass, template,"
        " collection, metric, support, keys, docs, extra)",
        "",
    ]
    return "\n".join(lines)


def write_outputs(bundle: Bundle, out_dir: str | Path, extra: dict[str, object] | None = None) -> dict:
    """Write the Parquet files, `CARD.md` and `results.json`; returns the results dict."""
    out = Path(out_dir)
    write_parquet(bundle, out)
    (out / "CARD.md").write_text(card_markdown(bundle), encoding="utf-8")
    results = summary(bundle)
    results.update(extra or {})
    results["config"] = bundle.config
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return results
