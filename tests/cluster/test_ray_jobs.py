"""Ray by Ray's conventions: a real cluster from `ray start --head` (own ports, own session folder) and real
`ray job submit` jobs of `librarian build --workers 2` and of a small pipeline run, which join the job's
cluster through RAY_ADDRESS instead of starting (or wrongly configuring) one of their own.

The head runs as `ray start --head --block` in its own process group and is stopped by signalling that
process (then the group), never by `ray stop`, which would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from librarian.cluster.ray_init import ENV_ADDRESS, cluster_address

BIN = Path(sys.executable).parent
PORTS = ("port", "dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
         "metrics-export-port", "runtime-env-agent-port", "node-manager-port", "object-manager-port")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Head:
    """A running head node: its GCS address (what RAY_ADDRESS holds) and its job-submission URL."""

    address: str
    dashboard: str
    env: dict


def _env() -> dict:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_AUTH_MODE": "disabled",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop(ENV_ADDRESS, None)
    return env


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to `ray start --block` (it stops its own processes), then SIGKILL whatever is left of its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session): only what this fixture started
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def head():
    import ray.util

    ports = {name: free_port() for name in PORTS}
    temp = tempfile.mkdtemp(prefix="rh", dir="/tmp")  # Ray's socket paths must stay short
    log_path = Path(temp) / "head.log"
    args = [str(BIN / "ray"), "start", "--head", "--block", "--num-cpus", "2", "--include-dashboard", "true",
            "--dashboard-host", "127.0.0.1", "--temp-dir", temp, "--disable-usage-stats",
            "--object-store-memory", str(200 * 1024 * 1024)]
    for name, port in ports.items():
        args += [f"--{name}", str(port)]
    env = _env()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{dashboard}/api/version", timeout=2):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start --head did not come up: {log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield Head(f"{ray.util.get_node_ip_address()}:{ports['port']}", dashboard, env)
    finally:
        _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


def submit(head: Head, *entrypoint: str, timeout_s: float = 400) -> str:
    """`ray job submit` (retried while the head's job agent is still starting); returns the job's output."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run([str(BIN / "ray"), "job", "submit", "--address", head.dashboard, "--", *entrypoint],
                              capture_output=True, text=True, env=head.env, timeout=timeout_s)
        text = done.stdout + done.stderr
        if "No available agent" not in text or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert done.returncode == 0 and "succeeded" in text, text[-4000:]
    return text


def _notes(folder: Path) -> Path:
    folder.mkdir(parents=True)
    people = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra"]
    for i in range(12):
        a, b = people[i % 4], people[(i + 1) % 4]
        (folder / f"note-{i:02d}.md").write_text(
            f"# Meeting {i}\n\n{a} met {b} about project Nimbus-{i % 3}.\n\nOwner: {a}\n", encoding="utf-8")
    return folder


def test_the_cluster_to_join_follows_ray_conventions(monkeypatch):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    assert cluster_address("") == "" and cluster_address("auto") == "auto"
    monkeypatch.setenv(ENV_ADDRESS, "10.0.0.5:6379")
    assert cluster_address("") == "10.0.0.5:6379"  # as inside `ray job submit`
    assert cluster_address("ray://head:10001") == "ray://head:10001"  # an address given wins
    assert cluster_address("local") == ""  # local: start one here even inside a job


@pytest.mark.slow
def test_a_pipeline_driver_joins_the_cluster_ray_address_names(head):
    script = textwrap.dedent("""
        import json, ray
        from librarian.cluster import topology
        owned = topology.start(topology.RayConfig(), needed_cpus=8)  # a local Ray would get 8 CPUs
        print(json.dumps({"owned": owned, "cpus": ray.cluster_resources().get("CPU"),
                          "gcs": ray.get_runtime_context().gcs_address}))
        ray.shutdown()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**head.env, ENV_ADDRESS: head.address})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"owned": True, "cpus": 2.0, "gcs": head.address}  # the head's 2 CPUs: joined, none passed


@pytest.mark.slow
def test_ray_job_submit_runs_build_with_workers_on_the_cluster(head, tmp_path):
    from ray.util.state import list_tasks

    notes, out = _notes(tmp_path / "notes"), tmp_path / "ws"
    text = submit(head, str(BIN / "librarian"), "build", str(notes), "--out", str(out), "--workers", "2",
                  "--embedder", "none", "--no-export")
    results = json.loads((out / "results.json").read_text())
    assert results["docs"] == 12 and results["cost"]["shards"] == 4 and results["ops_applied"] > 0
    assert "num_cpus and num_gpus must not be provided" not in text
    shards = list_tasks(address=head.dashboard, filters=[("name", "=", "extract_shard")], raise_on_missing_output=False)
    assert len(shards) >= 4  # the shards ran as tasks of this cluster, not of a Ray the job started


@pytest.mark.slow
def test_ray_job_submit_runs_a_pipeline_whose_probe_workers_join_the_cluster(head, tmp_path):
    from ray.util.state import list_actors

    out = tmp_path / "ev"
    submit(head, str(BIN / "librarian"), "evaluate", "--out", str(out), "people=100", "questions=4",
           "stores=[flat]", "ablations=[]", "gradient=0", "workers=1", "n_boot=100")
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["name"] for r in rows] == ["flat"] and rows[0]["n"] == 4
    actors = list_actors(address=head.dashboard, raise_on_missing_output=False)
    assert any(a.class_name == "AnswererProbeWorker" for a in actors)
    assert (out / "mlflow.db").is_file()  # the run logged (to a local store: no MLflow variable was set)
