"""scripts/gpu_check.sh (the full-cluster check): valid bash, runs scripts/gpu_check.py first, and on a machine
without a CUDA device it skips every check, says why, and still writes results.json (what it measures on a GPU is
described in docs/cluster.md)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.infra.cmdcheck import ROOT

SCRIPT = ROOT / "scripts/gpu_check.sh"
CHECKS = {"vllm_hf_parity", "lora_sync", "full_sync_ipc", "full_sync_nccl", "train_builder_vllm", "train_builder_nccl",
          "deepspeed_bf16"}


def test_the_script_is_valid_bash_and_executable():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert os.access(SCRIPT, os.X_OK)


def test_without_a_gpu_every_check_is_skipped_with_its_reason(tmp_path):
    import torch

    if torch.cuda.is_available():
        return  # on a GPU machine the script runs for real (minutes); this test is about the CPU path
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_CHECK_ON_CPU", "GPU_CHECK_ONLY")}
    proc = subprocess.run([str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert CHECKS <= set(results) and results["gpus"] == 0
    assert all(results[c] == {"status": "skipped", "reason": "no CUDA device here"} for c in CHECKS)
    bare = results["bare_gpu_check"]  # scripts/gpu_check.py ran first and found no GPU (exit 2: not a failure)
    assert bare["status"] == "skipped" and bare["exit"] == 2 and bare["passed"] is False
    assert "no GPU visible" in proc.stdout.splitlines()[0]
    assert json.loads((tmp_path / "out" / "bare" / "results.json").read_text())["status"] == "no GPU visible"
