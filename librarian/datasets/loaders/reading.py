"""Reading-comprehension benchmarks: HotpotQA (dev json) and NarrativeQA (the repository's csv files)."""

from __future__ import annotations

from pathlib import Path

from librarian.datasets.loaders._io import need, need_dir, read_csv, read_json_list
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question, dumps_json

HOTPOT_FORMAT = (
    "HotpotQA's hotpot_dev_*_v1.json: a list of {_id, question, answer, supporting_facts: "
    "[[title, sentence_id]], context: [[title, [sentence, ...]]], type, level}"
)
NARRATIVEQA_FORMAT = (
    "the NarrativeQA repository folder: documents.csv (document_id, set, kind, ...), qaps.csv "
    "(document_id, set, question, answer1, answer2), third_party/wikipedia/summaries.csv "
    "(document_id, set, summary) and optionally tmp/<document_id>.content (full stories)"
)


def load_hotpotqa(path: str | Path, split: str = "dev", shared: bool = False) -> Bundle:
    """One document per context paragraph (its sentences joined); one store per question,
    or one shared store of distinct titles with `shared=True`."""
    path = Path(path)
    rows = read_json_list(path, HOTPOT_FORMAT)
    corpus: list[CorpusDoc] = []
    seen: set[str] = set()
    questions: list[Question] = []
    for i, r in enumerate(rows):
        need(r, ("_id", "question", "answer", "supporting_facts", "context"), f"{path} record {i}", HOTPOT_FORMAT)
        qid = str(r["_id"])
        coll = "hotpotqa" if shared else qid
        ids: dict[str, str] = {}
        for ci, para in enumerate(r["context"]):
            if not (isinstance(para, list) and len(para) == 2 and isinstance(para[1], list)):
                raise DatasetError(f"{path} record {i} context {ci}: expected [title, [sentences]]; "
                                   f"expected {HOTPOT_FORMAT}")
            title, sents = str(para[0]), [str(s) for s in para[1]]
            doc_id = f"hp/{title}" if shared else f"{qid}/{title}"
            ids[title] = doc_id
            if doc_id in seen:
                continue
            seen.add(doc_id)
            corpus.append(CorpusDoc(id=doc_id, text="".join(sents).strip(), origin=title, collection=coll,
                                    source=title, title=title, extra={"sentences": dumps_json(sents)}))
        sp = [[str(t), int(k)] for t, k in r["supporting_facts"]]
        qtype, level = str(r.get("type", "")), str(r.get("level", ""))
        questions.append(Question(
            id=qid, question=str(r["question"]), answers=[str(r["answer"])], split=split,
            qclass=qtype or "unknown", template=f"{qtype}-{level}".strip("-") or "unknown", collection=coll,
            metric="squad_f1", support=sorted({ids[t] for t, _ in sp if t in ids}), docs=list(ids.values()),
            extra={"supporting_facts": dumps_json(sp), "level": level},
        ))
    return Bundle(name="hotpotqa", corpus=corpus, questions=questions,
                  config={"input": str(path), "split": split, "shared": shared})


def load_narrativeqa(path: str | Path, stories: bool = False) -> Bundle:
    """One store per book or script: its summary (and its story with `stories=True`);
    questions with their two reference answers."""
    root = need_dir(Path(path), NARRATIVEQA_FORMAT)
    docs = read_csv(root / "documents.csv", NARRATIVEQA_FORMAT, ("document_id", "set", "kind"))
    sums = read_csv(root / "third_party" / "wikipedia" / "summaries.csv", NARRATIVEQA_FORMAT,
                    ("document_id", "summary"))
    qaps = read_csv(root / "qaps.csv", NARRATIVEQA_FORMAT, ("document_id", "set", "question", "answer1", "answer2"))
    meta = {d["document_id"]: d for d in docs}
    corpus: list[CorpusDoc] = []
    for s in sums:
        did = s["document_id"]
        if did not in meta:
            raise DatasetError(f"{root / 'third_party/wikipedia/summaries.csv'}: document_id {did} is not in "
                               f"documents.csv; expected {NARRATIVEQA_FORMAT}")
        title = meta[did].get("wiki_title", "")
        corpus.append(CorpusDoc(id=f"{did}/summary", text=s["summary"].strip(), origin=did, collection=did,
                                source="summary", title=title, extra={"kind": meta[did]["kind"]}))
        if stories:
            story = root / "tmp" / f"{did}.content"
            if not story.is_file():
                raise DatasetError(f"{story}: story file not found (stories=True); expected {NARRATIVEQA_FORMAT}")
            corpus.append(CorpusDoc(id=f"{did}/story", text=story.read_text(encoding="utf-8", errors="replace"),
                                    origin=did, collection=did, source="story", title=title,
                                    extra={"kind": meta[did]["kind"]}))
    questions = []
    for i, q in enumerate(qaps):
        did = q["document_id"]
        kind = meta.get(did, {}).get("kind", "unknown")
        questions.append(Question(
            id=f"{did}/q{i:05d}", question=q["question"], answers=[q["answer1"], q["answer2"]], split=q["set"],
            qclass=kind, template=kind, collection=did, metric="squad_f1", support=[f"{did}/summary"],
        ))
    return Bundle(name="narrativeqa", corpus=corpus, questions=questions,
                  config={"input": str(root), "stories": stories})
