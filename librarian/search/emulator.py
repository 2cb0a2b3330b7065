"""Start and stop `noida-db`, an Elasticsearch-8-API emulator from PyPI, for tests and benchmarks.

CI and `make test` have no Elasticsearch; they run the Elasticsearch backend
against this emulator on loopback. The server binary inside the installed
`noida_db` package is started directly (its console-script wrapper would
leave the server running when killed) and stopped by PID.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def noida_binary() -> Path:
    """The server binary inside the installed `noida_db` package."""
    spec = importlib.util.find_spec("noida_db")
    if spec is None or spec.origin is None:
        raise RuntimeError("noida-db is not installed; run `make setup` (it comes with the [test] extra)")
    binary = Path(spec.origin).parent / "noida-db"
    if not binary.is_file():
        raise RuntimeError(f"noida-db binary not found at {binary}")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return binary


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Emulator:
    """A running emulator: its URL and process."""

    url: str
    process: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        """Stop the server by PID (SIGTERM, then SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def __enter__(self) -> Emulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_emulator(data_dir: str | os.PathLike[str], port: int | None = None, timeout_s: float = 30.0) -> Emulator:
    """Start the emulator's Elasticsearch service on loopback and wait until it answers."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_path = data_dir.parent / f"noida-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(noida_binary()), "start", "--only", "elasticsearch", "--elasticsearch-port", str(port),
             "--host", "127.0.0.1", "--data-dir", str(data_dir)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    emulator = Emulator(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + timeout_s
    while not answers(emulator.url):
        if process.poll() is not None or time.monotonic() > deadline:
            emulator.stop()
            raise RuntimeError(f"noida-db did not start on {emulator.url} (exit {process.poll()}): "
                               f"{log_path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    return emulator
