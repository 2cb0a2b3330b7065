"""The engine process: `python -m librarian.models.vllm_worker`, run by the `vllm` backend in `.venv-vllm`.

Reads an `EngineConfig` as the first line of stdin, starts `VLLMEngine`,
answers `{"ready": true, "info"}`, then serves one JSON request per line
until `shutdown` or the end of stdin (the backend went away). The protocol
uses a private copy of the original stdout; fd 1 is pointed at stderr so that
nothing vLLM or its subprocesses print can corrupt the protocol stream.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

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
        return engine.init_nccl(str(args["host"]), int(args["port"]), int(args["world_size"]))
    if op == "load_full_nccl":
        return engine.load_full_nccl(int(args["version"]), list(args["meta"]))
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


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    first = sys.stdin.readline()
    try:
        cfg = EngineConfig.from_json(parse_line(first, "engine config"))
        from librarian.models.vllm_engine import VLLMEngine

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
