"""The reader's policy backend, a progress bar over its calls, and the model that writes answers from passages.

`make_reader_backend` builds the backend `AskConfig` names (default: the
reader's own, `config.DEFAULT_BACKEND`). `ModelProgress` shows each model
call on stderr. With the `jam` reader and a model, the scripted researcher
finds the passages and `write_answers` has the model write each answer from
them (`WRITER_PROMPT`).
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

from librarian.answering.config import DEFAULT_BACKEND, AskConfig
from librarian.models import make_backend
from librarian.models.base import SamplingParams


def make_reader_backend(cfg: AskConfig, reader: str | None = None):
    """The backend `cfg` names (default: the reader's own)."""
    name, args = DEFAULT_BACKEND.get(reader or cfg.reader, ("scripted", {}))
    if cfg.backend is not None:
        name, args = cfg.backend, {}
    if name != "scripted":
        print(f"librarian ask: loading the {name} backend ...", file=sys.stderr, flush=True)
    return make_backend(name, **{**args, **cfg.backend_args})


class ModelProgress:
    """A backend that shows each model call on stderr (turns so far, questions still running, time)."""

    def __init__(self, backend: Any, label: str) -> None:
        self.backend = backend
        self.bar = tqdm(desc=label, unit="turn", file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def generate(self, conversations: Any, tools: Any, params: Any) -> Any:
        self.bar.set_postfix_str(f"{len(conversations)} running")
        out = self.backend.generate(conversations, tools, params)
        self.bar.update(1)
        return out

    def close(self) -> None:
        self.bar.close()


WRITER_PROMPT = ("You answer questions about the user's own notes. Use only the passages below; each starts with "
                 "the file and line it comes from. Answer in one or two sentences and name the file(s) you used. "
                 "If the passages do not answer the question, say that the notes do not say.")


def write_answers(writer: Any, records: list[dict[str, Any]], cfg: AskConfig) -> None:
    """A model writes each found record's answer from its passages (records that found nothing keep none)."""
    todo = [r for r in records if r.get("found") and r.get("passages")]
    if not todo:
        return
    prompts = [[{"role": "system", "content": WRITER_PROMPT},
                {"role": "user", "content": "Passages:\n" + "\n".join(
                    f"[{p['file']}:{p['file_line'] or '?'}] {p['text']}" for p in r["passages"])
                 + f"\n\nQuestion: {r['question']}"}] for r in todo]
    progress = ModelProgress(writer, "writing answers")
    try:
        samples = progress.generate(prompts, None, SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0))
    finally:
        progress.close()
    for rec, (sample, *_) in zip(todo, samples, strict=True):
        rec["answer"], rec["answered_by"] = sample.text.strip(), getattr(writer, "name", type(writer).__name__)
