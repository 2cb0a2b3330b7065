"""Writers of tiny files in each public benchmark's official format (no downloads)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write_locomo(path: Path) -> Path:
    sample = {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Mira", "speaker_b": "Otto",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Mira", "dia_id": "D1:1", "text": "I adopted a cat named Pip."},
                {"speaker": "Otto", "dia_id": "D1:2", "text": "Lovely! I started pottery.",
                 "img_url": ["http://x"], "blip_caption": "a clay bowl"},
            ],
            "session_2_date_time": "9:00 am on 20 May, 2023",
            "session_2": [{"speaker": "Mira", "dia_id": "D2:1", "text": "Pip learned to fetch."}],
        },
        "qa": [
            {"question": "What is Mira's cat called?", "answer": "Pip", "evidence": ["D1:1"], "category": 4},
            {"question": "What did Pip learn and what is Otto's hobby?", "answer": "fetch, pottery",
             "evidence": ["D2:1", "D1:2"], "category": 1},
            {"question": "When did Mira adopt Pip?", "answer": 2023, "evidence": ["D1:1"], "category": 2},
            {"question": "What is Otto's dog called?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
        ],
        "event_summary": {}, "observation": {}, "session_summary": {},
    }
    path.write_text(json.dumps([sample]))
    return path


def write_longmemeval(path: Path) -> Path:
    rows = [
        {"question_id": "q1", "question_type": "single-session-user", "question": "Where did I travel?",
         "answer": "Lisbon", "question_date": "2023/05/30 (Tue) 10:00",
         "haystack_session_ids": ["s_a", "answer_1"], "haystack_dates": ["2023/05/01", "2023/05/02"],
         "haystack_sessions": [[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                               [{"role": "user", "content": "I flew to Lisbon.", "has_answer": True}]],
         "answer_session_ids": ["answer_1"]},
        {"question_id": "q2_abs", "question_type": "temporal-reasoning", "question": "When did I visit Rome?",
         "answer": "You did not mention Rome.", "question_date": "2023/06/01",
         "haystack_session_ids": ["s_b"], "haystack_dates": ["2023/05/03"],
         "haystack_sessions": [[{"role": "user", "content": "Nothing about Rome."}]],
         "answer_session_ids": []},
    ]
    path.write_text(json.dumps(rows))
    return path


def write_hotpot(path: Path) -> Path:
    rows = [{
        "_id": "5a8b57f25542995d1e6f1371", "question": "Which city is the river Avon's town in?",
        "answer": "Bath", "type": "bridge", "level": "easy",
        "supporting_facts": [["River Avon", 0], ["Bath", 1]],
        "context": [["River Avon", ["The River Avon flows through Bath.", " It is long."]],
                    ["Bath", ["Bath is a town.", " Bath is in Somerset."]],
                    ["Decoy", ["Nothing here."]]],
    }]
    path.write_text(json.dumps(rows))
    return path


def write_narrativeqa(root: Path) -> Path:
    (root / "third_party" / "wikipedia").mkdir(parents=True)
    (root / "tmp").mkdir()
    with (root / "documents.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["document_id", "set", "kind", "story_url", "story_file_size", "wiki_url", "wiki_title",
                    "story_word_count", "story_start", "story_end"])
        w.writerow(["0a1b", "train", "gutenberg", "http://x", "10", "http://w", "The Lamp", "3", "A", "Z"])
    with (root / "third_party" / "wikipedia" / "summaries.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["document_id", "set", "summary", "summary_tokenized"])
        w.writerow(["0a1b", "train", "A keeper guards a lamp.", "A keeper guards a lamp ."])
    with (root / "qaps.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["document_id", "set", "question", "answer1", "answer2", "question_tokenized",
                    "answer1_tokenized", "answer2_tokenized"])
        w.writerow(["0a1b", "train", "What does the keeper guard?", "a lamp", "the lamp", "", "", ""])
    (root / "tmp" / "0a1b.content").write_text("Once a keeper guarded a lamp.")
    return root


def write_bright(root: Path) -> Path:
    (root / "examples").mkdir(parents=True)
    (root / "documents").mkdir()
    pq.write_table(pa.Table.from_pylist([
        {"query": "Why do leaves turn red?", "reasoning": "pigments", "id": "0",
         "excluded_ids": ["N/A"], "gold_ids_long": ["leaf.txt"], "gold_ids": ["leaf_0.txt"],
         "gold_answer": "Anthocyanins are made as chlorophyll fades."},
    ]), root / "examples" / "biology-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist([
        {"id": "leaf_0.txt", "content": "Anthocyanin pigments appear in autumn."},
        {"id": "root_0.txt", "content": "Roots take up water."},
    ]), root / "documents" / "biology-00000-of-00001.parquet")
    return root


def write_browsecomp(path: Path) -> Path:
    doc = {"docid": "101", "text": "The bridge opened in 1932.", "url": "http://a"}
    rows = [{"query_id": "7", "query": "In which year did the bridge open?", "answer": "1932",
             "evidence_docs": [doc], "gold_docs": [doc],
             "negative_docs": [{"docid": "202", "text": "A different bridge.", "url": "http://b"}]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path
