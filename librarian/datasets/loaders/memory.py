"""Conversational-memory benchmarks: LoCoMo (`locomo10.json`) and LongMemEval (s / m / oracle)."""

from __future__ import annotations

import re
from pathlib import Path

from librarian.datasets.loaders._io import need, read_json_list
from librarian.datasets.records import Bundle, CorpusDoc, DatasetError, Question, dumps_json
from librarian.datasets.scoring import LOCOMO_CATEGORIES

LOCOMO_FORMAT = (
    "LoCoMo's locomo10.json: a list of {sample_id, conversation: {speaker_a, speaker_b, "
    "session_<n>_date_time, session_<n>: [{speaker, dia_id, text}]}, qa: [{question, answer "
    "(adversarial_answer for category 5), evidence: [dia_id], category: 1-5}]}"
)
LONGMEMEVAL_FORMAT = (
    "LongMemEval's longmemeval_{s,m,oracle}.json: a list of {question_id, question_type, question, "
    "answer, question_date, haystack_session_ids, haystack_dates, haystack_sessions: "
    "[[{role, content}]], answer_session_ids}"
)


def _turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def load_locomo(path: str | Path) -> Bundle:
    """One document per session (id `<sample>/session_<n>`); QA with categories and evidence."""
    path = Path(path)
    samples = read_json_list(path, LOCOMO_FORMAT)
    corpus: list[CorpusDoc] = []
    questions: list[Question] = []
    for si, s in enumerate(samples):
        need(s, ("sample_id", "conversation", "qa"), f"{path} sample {si}", LOCOMO_FORMAT)
        sid, conv = str(s["sample_id"]), s["conversation"]
        need(conv, ("speaker_a", "speaker_b"), f"{path} sample {sid} conversation", LOCOMO_FORMAT)
        session_of: dict[str, str] = {}
        numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        for n in numbers:
            turns = conv[f"session_{n}"]
            date = str(conv.get(f"session_{n}_date_time", ""))
            doc_id = f"{sid}/session_{n}"
            for ti, t in enumerate(turns):
                need(t, ("speaker", "dia_id", "text"), f"{path} {doc_id} turn {ti}", LOCOMO_FORMAT)
                session_of[t["dia_id"]] = doc_id
            text = "\n".join([f"Session {n} ({date})", *(_turn_text(t) for t in turns)])
            corpus.append(CorpusDoc(id=doc_id, text=text, origin=doc_id, collection=sid, source=date,
                                    title=f"{sid} session {n}", path=f"{sid}/session_{n:02d}",
                                    extra={"date": date, "dia_ids": ",".join(t["dia_id"] for t in turns)}))
        for qi, qa in enumerate(s["qa"]):
            need(qa, ("question", "category", "evidence"), f"{path} sample {sid} qa {qi}", LOCOMO_FORMAT)
            cat = int(qa["category"])
            if cat not in LOCOMO_CATEGORIES:
                raise DatasetError(f"{path} sample {sid} qa {qi}: category {cat} is not 1-5; expected {LOCOMO_FORMAT}")
            if cat == 5:
                answers = ["no information available"]
            else:
                need(qa, ("answer",), f"{path} sample {sid} qa {qi}", LOCOMO_FORMAT)
                answers = [str(qa["answer"])]
            evidence = [str(e) for e in qa["evidence"]]
            extra = {"category": str(cat), "evidence": dumps_json(evidence)}
            if "adversarial_answer" in qa:
                extra["adversarial_answer"] = str(qa["adversarial_answer"])
            questions.append(Question(
                id=f"{sid}/q{qi:03d}", question=str(qa["question"]), answers=answers, split="test",
                qclass=LOCOMO_CATEGORIES[cat], template=f"category_{cat}", collection=sid, metric="locomo_f1",
                support=sorted({session_of[e] for e in evidence if e in session_of}), extra=extra,
            ))
    return Bundle(name="locomo", corpus=corpus, questions=questions, config={"input": str(path)})


def _variant(path: Path) -> str:
    m = re.search(r"longmemeval_(s|m|oracle)", path.name)
    return m.group(1) if m else "custom"


def load_longmemeval(path: str | Path) -> Bundle:
    """One store per question (its haystack); one document per session (id `<question>/<session>`)."""
    path = Path(path)
    rows = read_json_list(path, LONGMEMEVAL_FORMAT)
    corpus: list[CorpusDoc] = []
    questions: list[Question] = []
    fields = ("question_id", "question_type", "question", "answer", "haystack_session_ids",
              "haystack_sessions", "answer_session_ids")
    for i, r in enumerate(rows):
        need(r, fields, f"{path} record {i}", LONGMEMEVAL_FORMAT)
        qid = str(r["question_id"])
        dates = r.get("haystack_dates") or [""] * len(r["haystack_session_ids"])
        ids = []
        for sess_id, date, turns in zip(r["haystack_session_ids"], dates, r["haystack_sessions"], strict=True):
            doc_id = f"{qid}/{sess_id}"
            ids.append(doc_id)
            for ti, t in enumerate(turns):
                need(t, ("role", "content"), f"{path} {doc_id} turn {ti}", LONGMEMEVAL_FORMAT)
            body = "\n".join(f"{t['role']}: {t['content']}" for t in turns)
            corpus.append(CorpusDoc(id=doc_id, text=f"Session {sess_id} ({date})\n{body}", origin=str(sess_id),
                                    collection=qid, source=str(date), title=str(sess_id),
                                    extra={"date": str(date)}))
        abstain = qid.endswith("_abs")
        qtype = str(r["question_type"])
        questions.append(Question(
            id=qid, question=str(r["question"]), answers=[str(r["answer"])], split="test", qclass=qtype,
            template=qtype + ("_abs" if abstain else ""), collection=qid, metric="judge",
            support=[f"{qid}/{s}" for s in r["answer_session_ids"]], docs=ids,
            extra={"abstention": str(abstain).lower(), "question_date": str(r.get("question_date", ""))},
        ))
    return Bundle(name="longmemeval", corpus=corpus, questions=questions,
                  config={"input": str(path), "variant": _variant(path)})
