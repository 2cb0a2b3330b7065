"""`answer`: a reader role answers questions over a built workspace, in batches; one record per question.

The reader is `AskConfig.reader` (`auto`: the workspace's default). With the
`jam` reader and a model (a `writer`, or a model `backend` without
`llm_researcher`), the scripted researcher finds the passages and the model
writes each answer from them. `librarian ask`, `librarian serve`'s questions
and the online server all answer through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from librarian.answering.backends import ModelProgress, make_reader_backend, write_answers
from librarian.answering.config import AskConfig, AskItem
from librarian.answering.readers import BuiltWorkspace, make_role, resolve_reader, writes_answers
from librarian.answering.records import record, score_record
from librarian.config import InputError
from librarian.models.base import SamplingParams
from librarian.models.scripted import ScriptedBackend, make_scripted_backend
from librarian.roles import LoopConfig, ToolContext, ToolEnv, run_episodes
from librarian.roles.kbgym_passes import forward_task
from librarian.roles.researcher import ResearchEnv


def answer(opened: BuiltWorkspace, items: Sequence[AskItem], cfg: AskConfig, backend: Any = None,
           with_trace: bool = False, writer: Any = None) -> list[dict[str, Any]]:
    """Answer `items` over an opened workspace; returns one record per item.

    The reader is `cfg.reader` (`auto`: `default_reader`). With the `jam`
    reader and a model (`writer`, or a model `cfg.backend` without
    `cfg.llm_researcher`), the scripted researcher finds the passages and the
    model writes each answer from them.
    """
    reader = resolve_reader(cfg.reader, opened)
    role = make_role(reader, cfg.budget)
    if reader in ("kbgym", "jam") and opened.index is None:
        raise InputError(f"{opened.snapshot_path}: the {reader} reader searches, but no saved index was found "
                         "beside the snapshot; build the workspace with `librarian build` or use --reader librarian")
    if reader == "jam" and (writer is not None or writes_answers(cfg, reader)):
        writer = writer if writer is not None else backend if backend is not None else make_reader_backend(cfg, reader)
        backend = make_scripted_backend("jam_researcher")
    else:
        writer = None
        backend = backend if backend is not None else make_reader_backend(cfg, reader)
    model = None if isinstance(backend, ScriptedBackend) else ModelProgress(backend, f"{reader} reader (model turns)")
    mode = cfg.search_mode
    if reader == "jam" and getattr(opened.index, "embedder", None) is not None:
        mode = "hybrid"  # the researcher's search is BM25 + dense when the index has vectors
    ctx = ToolContext(opened.source, index=opened.index, search_mode=mode)
    env_type = ResearchEnv if reader == "jam" else ToolEnv
    loop = LoopConfig(SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=0.0))
    out: list[dict[str, Any]] = []
    try:
        with tqdm(total=len(items), desc=f"asking ({reader})", unit="question", disable=len(items) < 2) as bar:
            for start in range(0, len(items), cfg.batch):
                chunk = items[start:start + cfg.batch]
                envs = [env_type(role, ctx, item.question if reader == "jam" else forward_task(item.question))
                        for item in chunk]
                for item, traj in zip(chunk, run_episodes(envs, model or backend, role, loop), strict=True):
                    out.append({**record(item, traj, opened.source, with_trace), "reader": reader})
                bar.update(len(chunk))
    finally:
        if model is not None:
            model.close()
    if writer is not None:
        write_answers(writer, out, cfg)
        for rec, item in zip(out, items, strict=True):
            score_record(rec, item)
    return out
