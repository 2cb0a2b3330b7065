"""The engine process: `python -m librarian.models.vllm_worker`, run by the `vllm` backend in `.venv-vllm`.

Reads an `EngineConfig` as the first line of stdin, starts `VLLMEngine`,
answers `{"ready": true, "info"}`, then serves one JSON request per line
until `shutdown` or the end of stdin (the backend went away). The protocol
uses a private copy of the original stdout; fd 1 is pointed at stderr so that
nothing vLLM or its subprocesses print can corrupt the protocol stream.

The engine process leads its own process group (the backend starts it in a
new session), and vLLM's workers belong to it. When the backend's process
dies without closing it (a Ray actor killed or out of memory), `watch_parent`
kills that whole group within about a second, so no orphaned engine keeps
its share of a GPU.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

from librarian.models.vllm_engine import VLLMEngine
from librarian.models.vllm_protocol import EngineConfig, failed, ok, parse_line, write_line

log = logging.getLogger("librarian.vllm_worker")


def dispatch(engine: Any, op: str, args: dict[str, Any]) -> Any:
    """Run one request on `engine` (a `VLLMEngine`); raises on an unknown op or bad arguments."""
    if op == "generate":
        return engine.generate(args["prompts"], args["params"])
    if op == "load_lora":
        return engine.load_lora(int(args["version"]), str(args["path"]))
    if op == "load_full_file":
        return engine.load_full_file(int(args["version"]), str(args["path"]))
    if op == "load_full_ipc":
        return engine.load_full_ipc(int(args["version"]), str(args["handles"]))
    if op == "init_nccl":
        return engine.init_nccl(dict(args["init_info"]))
    if op == "load_full_nccl":
        return engine.load_full_nccl(int(args["version"]), dict(args["update_info"]))
    if op == "close_nccl":
        return engine.close_nccl()
    if op == "sleep":
        return engine.sleep(int(args["level"]))
    if op == "wake_up":
        return engine.wake_up()
    if op == "info":
        return engine.info()
    raise ValueError(f"unknown engine op {op!r}")


def serve(engine: Any, requests: TextIO, answers: TextIO) -> None:
    """Answer requests line by line until `shutdown` or end of input."""
    for line in requests:
        if not line.strip():
            continue
        rid: Any = None
        try:
            req = parse_line(line, "engine request")
            rid, op = req.get("id"), req.get("op")
            if op == "shutdown":
                write_line(answers, ok(rid, None))
                return
            write_line(answers, ok(rid, dispatch(engine, str(op), dict(req.get("args") or {}))))
        except Exception as exc:  # every failure goes back to the caller, the engine keeps serving
            log.exception("engine request failed")
            write_line(answers, failed(rid, exc))


def watch_parent(interval_s: float = 0.5) -> threading.Thread:
    """A daemon thread that SIGKILLs this process group once the process that started this one has gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        log.error("the backend process %d is gone; stopping the engine's process group", parent)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    thread = threading.Thread(target=watch, daemon=True, name="librarian-parent-watch")
    thread.start()
    return thread


def main() -> int:
    if os.getpgrp() == os.getpid():  # our own group (start_new_session): safe to kill all of it
        watch_parent()
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    first = sys.stdin.readline()
    try:
        cfg = EngineConfig.from_json(parse_line(first, "engine config"))

        engine = VLLMEngine(cfg)
    except Exception as exc:
        log.exception("the vLLM engine did not start")
        write_line(answers, {"ready": False, "type": type(exc).__name__, "error": str(exc)})
        return 1
    write_line(answers, {"ready": True, "info": engine.info()})
    try:
        serve(engine, sys.stdin, answers)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
