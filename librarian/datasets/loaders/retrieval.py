"""Retrieval-heavy benchmarks turned into generation tasks: BrowseComp-Plus and BRIGHT (paper 000 A.2).

Both are graded by an LLM judge against a fixed reference answer (metric `judge`).
"""

from __future__ import annotations

import json
from pathlib import Path

from librarian.datasets.loaders._io import need, need_dir, read_records
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question, dumps_json

BROWSECOMP_FORMAT = (
    "BrowseComp-Plus's decrypted queries (browsecomp_plus_decrypted.jsonl): one {query_id, query, answer, "
    "evidence_docs, gold_docs, negative_docs} per line, each *_docs a list of {docid, text[, url]}; "
    "optionally a corpus file (.jsonl or .parquet) of {docid, text[, url]}"
)
BRIGHT_FORMAT = (
    "the BRIGHT dataset folder: examples/<domain>-*.parquet (or <domain>.jsonl) with {id, query, "
    "gold_ids, excluded_ids[, gold_answer]} and documents/<domain>-*.parquet (or .jsonl) with {id, content}"
)


def _doc(d: dict, where: str) -> CorpusDoc:
    need(d, ("docid", "text"), where, BROWSECOMP_FORMAT)
    did = str(d["docid"])
    return CorpusDoc(id=did, text=str(d["text"]), origin=did, collection="browsecomp_plus",
                     source=str(d.get("url", "") or ""), title=did)


def load_browsecomp_plus(path: str | Path, corpus_path: str | Path | None = None) -> Bundle:
    """Queries with per-query document sets (`docs`: evidence + gold + negatives; `support`: evidence)."""
    path = Path(path)
    rows = read_records(path, BROWSECOMP_FORMAT)
    docs: dict[str, CorpusDoc] = {}
    questions: list[Question] = []
    for i, r in enumerate(rows):
        where = f"{path} record {i}"
        need(r, ("query_id", "query", "answer", "evidence_docs", "gold_docs", "negative_docs"), where,
             BROWSECOMP_FORMAT)
        sets: dict[str, list[str]] = {}
        for key in ("evidence_docs", "gold_docs", "negative_docs"):
            sets[key] = []
            for j, d in enumerate(r[key] or []):
                doc = _doc(d, f"{where} {key}[{j}]")
                docs.setdefault(doc.id, doc)
                sets[key].append(doc.id)
        member = list(dict.fromkeys(sets["evidence_docs"] + sets["gold_docs"] + sets["negative_docs"]))
        questions.append(Question(
            id=str(r["query_id"]), question=str(r["query"]), answers=[str(r["answer"])], split="test",
            qclass="browsecomp", template="browsecomp", collection="browsecomp_plus", metric="judge",
            support=sets["evidence_docs"], docs=member,
            extra={"gold_docs": dumps_json(sets["gold_docs"]), "negative_docs": dumps_json(sets["negative_docs"])},
        ))
    if corpus_path is not None:
        for i, d in enumerate(read_records(Path(corpus_path), BROWSECOMP_FORMAT)):
            doc = _doc(d, f"{corpus_path} record {i}")
            docs.setdefault(doc.id, doc)
    return Bundle(name="browsecomp_plus", corpus=list(docs.values()), questions=questions,
                  config={"input": str(path), "corpus": str(corpus_path) if corpus_path else None})


def _domain_file(root: Path, sub: str, domain: str) -> Path:
    folder = need_dir(root / sub, BRIGHT_FORMAT)
    for pattern in (f"{domain}-*.parquet", f"{domain}.parquet", f"{domain}.jsonl", f"{domain}.json"):
        hits = sorted(folder.glob(pattern))
        if hits:
            return hits[0]
    raise DatasetError(f"{folder}: no file for domain {domain!r}; expected {BRIGHT_FORMAT}")


def _domains(root: Path) -> list[str]:
    folder = need_dir(root / "examples", BRIGHT_FORMAT)
    names = {p.name.split("-")[0].split(".")[0] for p in folder.iterdir() if p.suffix in (".parquet", ".jsonl", ".json")}
    if not names:
        raise DatasetError(f"{folder}: no example files; expected {BRIGHT_FORMAT}")
    return sorted(names)


def load_bright(path: str | Path, domains: list[str] | None = None, answers_path: str | Path | None = None
                ) -> Bundle:
    """One store per domain; each query with its gold and excluded ids and a fixed reference answer
    (the example's `gold_answer`, or `answers_path`: a JSON object {example id: answer})."""
    root = need_dir(Path(path), BRIGHT_FORMAT)
    extra_answers: dict[str, str] = {}
    if answers_path is not None:
        ap = Path(answers_path)
        if not ap.is_file():
            raise DatasetError(f"{ap}: file not found; expected a JSON object {{example id: reference answer}}")
        extra_answers = {str(k): str(v) for k, v in json.loads(ap.read_text(encoding="utf-8")).items()}
    corpus: list[CorpusDoc] = []
    questions: list[Question] = []
    for domain in domains or _domains(root):
        dfile = _domain_file(root, "documents", domain)
        for i, d in enumerate(read_records(dfile, BRIGHT_FORMAT)):
            need(d, ("id", "content"), f"{dfile} record {i}", BRIGHT_FORMAT)
            corpus.append(CorpusDoc(id=f"{domain}/{d['id']}", text=str(d["content"]), origin=str(d["id"]),
                                    collection=domain, source=domain, title=str(d["id"])))
        efile = _domain_file(root, "examples", domain)
        for i, e in enumerate(read_records(efile, BRIGHT_FORMAT)):
            where = f"{efile} record {i}"
            need(e, ("id", "query", "gold_ids", "excluded_ids"), where, BRIGHT_FORMAT)
            eid = str(e["id"])
            ref = extra_answers.get(eid, e.get("gold_answer"))
            if ref in (None, "", "N/A"):
                raise DatasetError(f"{where}: no reference answer (field 'gold_answer' missing or N/A, and "
                                   f"{eid!r} not in the answers file); the generation variant needs one")
            excluded = [str(x) for x in e["excluded_ids"] if str(x) != "N/A"]
            questions.append(Question(
                id=f"{domain}/{eid}", question=str(e["query"]), answers=[str(ref)], split="test",
                qclass=domain, template=domain, collection=domain, metric="judge",
                support=[f"{domain}/{g}" for g in e["gold_ids"]],
                extra={"excluded_ids": dumps_json([f"{domain}/{x}" for x in excluded])},
            ))
    return Bundle(name="bright", corpus=corpus, questions=questions,
                  config={"input": str(root), "domains": domains, "answers": str(answers_path or "")})
