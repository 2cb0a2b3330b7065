"""A real `mlflow server` on loopback for the session (sqlite backend, one worker), stopped by SIGTERM;
and no MLflow variable from the environment leaks into a tracking test."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def no_mlflow_environment(monkeypatch):
    """A developer's own MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME must not redirect these tests."""
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(key, raising=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--backend-store-uri",
         f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root", str(root / "artifacts"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240  # slow to import under load
    while True:
        try:
            with urllib.request.urlopen(uri + "/health", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {(root / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield uri
    os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server and its workers
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
