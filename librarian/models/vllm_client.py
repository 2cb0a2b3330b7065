"""Transports from the `vllm` backend to a `VLLMEngine`: a child process in `.venv-vllm`, or in-process.

`EngineProcess` starts `python -m librarian.models.vllm_worker` with the
vLLM environment's interpreter and speaks `vllm_protocol` over its stdin and
stdout; its stderr (vLLM's logs) is kept in a ring buffer and quoted in
errors. The child sees only a private `PYTHONPATH` holding this package, so
nothing from the main environment shadows the vLLM environment's packages.
`InProcessEngine` runs the same dispatch in this process, for images where
vLLM is installed next to the caller (a GPU rollout actor).
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import librarian
from librarian.models.base import BackendError
from librarian.models.vllm_engine import VLLMEngine
from librarian.models.vllm_protocol import EngineConfig, ProtocolError, parse_line, request, write_line
from librarian.models.vllm_worker import dispatch

log = logging.getLogger(__name__)
VENV_NAME = ".venv-vllm"


def default_python() -> Path | None:
    """`$LIBRARIAN_VLLM_PYTHON`, else `.venv-vllm/bin/python` next to this source tree (if it exists)."""
    if os.environ.get("LIBRARIAN_VLLM_PYTHON"):
        return Path(os.environ["LIBRARIAN_VLLM_PYTHON"])
    candidate = Path(librarian.__file__).resolve().parents[1] / VENV_NAME / "bin" / "python"
    return candidate if candidate.is_file() else None


class EngineProcess:
    """A `VLLMEngine` in a child process; `call(op, **args)` is one request and its answer (thread-safe)."""

    def __init__(self, cfg: EngineConfig, python: str | Path, start_timeout_s: float = 900.0,
                 call_timeout_s: float = 3600.0) -> None:
        python = Path(python)
        if not python.is_file():
            raise BackendError(f"vllm backend: no interpreter at {python}; build the vLLM environment with "
                               "`make vllm-env` (scripts/vllm_env.sh) or set LIBRARIAN_VLLM_PYTHON")
        self.call_timeout_s = call_timeout_s
        self._lock = threading.Lock()
        self._next_id = 0
        self._stderr: collections.deque[str] = collections.deque(maxlen=80)
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._shim = Path(tempfile.mkdtemp(prefix="librarian-vllm-path-"))
        (self._shim / "librarian").symlink_to(Path(librarian.__file__).resolve().parent)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update({"PYTHONPATH": str(self._shim), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_NO_USAGE_STATS": "1",
                    "DO_NOT_TRACK": "1"})
        env.update({k: str(v) for k, v in cfg.env.items()})
        started = time.perf_counter()
        self.proc = subprocess.Popen([str(python), "-m", "librarian.models.vllm_worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True, bufsize=1)
        threading.Thread(target=self._pump_stdout, daemon=True, name="vllm-engine-stdout").start()
        threading.Thread(target=self._pump_stderr, daemon=True, name="vllm-engine-stderr").start()
        assert self.proc.stdin is not None
        write_line(self.proc.stdin, cfg.to_json())
        first = self._read(start_timeout_s, "starting the engine")
        if not first.get("ready"):
            self.close()
            raise BackendError(f"the vLLM engine did not start: {first.get('type')}: {first.get('error')}\n"
                               f"{self.stderr_tail()}")
        self.info: dict[str, Any] = dict(first.get("info") or {})
        self.start_s = time.perf_counter() - started
        log.info("vLLM engine ready in %.1f s (pid %d): %s", self.start_s, self.proc.pid, self.info)

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._answers.put(line)
        self._answers.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line.rstrip())
            log.debug("vllm engine: %s", line.rstrip())

    def stderr_tail(self, lines: int = 30) -> str:
        return "\n".join(list(self._stderr)[-lines:])

    def _read(self, timeout_s: float, doing: str) -> dict[str, Any]:
        try:
            line = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise BackendError(f"the vLLM engine gave no answer within {timeout_s:.0f} s while {doing}; "
                               f"its log ends:\n{self.stderr_tail()}") from None
        if line is None:
            code = self.proc.wait(timeout=30)
            raise BackendError(f"the vLLM engine exited (code {code}) while {doing}; its log ends:\n"
                               f"{self.stderr_tail()}")
        return parse_line(line, "vLLM engine answer")

    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        with self._lock:
            if self.proc.poll() is not None:
                raise BackendError(f"the vLLM engine is not running (exit code {self.proc.returncode}); "
                                   f"its log ends:\n{self.stderr_tail()}")
            self._next_id += 1
            rid = self._next_id
            assert self.proc.stdin is not None
            try:
                write_line(self.proc.stdin, request(rid, op, **args))
            except (BrokenPipeError, OSError) as exc:
                raise BackendError(f"cannot reach the vLLM engine ({exc}); its log ends:\n{self.stderr_tail()}") from None
            answer = self._read(timeout_s or self.call_timeout_s, f"running {op!r}")
        if answer.get("id") != rid:
            raise ProtocolError(f"vLLM engine answered request {answer.get('id')!r}, expected {rid}")
        if not answer.get("ok"):
            raise BackendError(f"vLLM engine {op!r} failed: {answer.get('type')}: {answer.get('error')}")
        return answer.get("result")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout_s: float = 30.0) -> None:
        """Ask the engine to shut down; terminate its process group if it does not exit in time."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                write_line(self.proc.stdin, {"id": 0, "op": "shutdown"})
                self.proc.stdin.close()
                self.proc.wait(timeout=timeout_s)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self._shim, ignore_errors=True)


class InProcessEngine:
    """The same calls as `EngineProcess`, against a `VLLMEngine` in this process (vLLM must be importable)."""

    def __init__(self, cfg: EngineConfig) -> None:
        started = time.perf_counter()
        self.engine = VLLMEngine(cfg)
        self.start_s = time.perf_counter() - started
        self.info = self.engine.info()
        self._lock = threading.Lock()

    def call(self, op: str, timeout_s: float | None = None, **args: Any) -> Any:
        with self._lock:
            try:
                return dispatch(self.engine, op, args)
            except (ValueError, RuntimeError, KeyError) as exc:
                raise BackendError(f"vLLM engine {op!r} failed: {type(exc).__name__}: {exc}") from exc

    @property
    def alive(self) -> bool:
        return True

    def close(self) -> None:
        self.engine.close()
