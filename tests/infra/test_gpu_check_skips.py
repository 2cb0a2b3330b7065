"""scripts/gpu_check.sh on a machine that lacks what a check needs: that check is skipped with a line naming what
is missing, and the run still writes results.json and exits 0. Run for real with the trainer interpreter started
through a wrapper that hides Ray (as on a machine without it), and with a vLLM interpreter that is not there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.infra.cmdcheck import ROOT

SCRIPT = ROOT / "scripts/gpu_check.sh"

# Runs a script file, or the script on stdin (`-`), with the modules named in GPU_CHECK_TEST_HIDE unimportable.
HIDING = """
import os, runpy, sys
for name in filter(None, os.environ.get("GPU_CHECK_TEST_HIDE", "").split(",")):
    sys.modules[name] = None
target, sys.argv = sys.argv[1], sys.argv[1:]
if target == "-":
    exec(compile(sys.stdin.read(), "<stdin>", "exec"), {"__name__": "__main__"})
else:
    runpy.run_path(target, run_name="__main__")
"""


def _run(tmp_path, only: str, **env: str) -> tuple[dict, str]:
    hiding = tmp_path / "hiding.py"
    hiding.write_text(HIDING)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{hiding}" "$@"\n')
    python.chmod(0o755)
    run_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GPU_CHECK_ON_CPU": "1", "GPU_CHECK_ONLY": only,
               "PYTHON": str(python), "PYTHONPATH": str(ROOT), **env}
    proc = subprocess.run([str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, env=run_env,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "out" / "results.json").read_text()), proc.stdout


def test_without_ray_the_training_run_is_skipped_saying_so(tmp_path):
    results, out = _run(tmp_path, "train_builder_vllm", GPU_CHECK_TEST_HIDE="ray")
    reason = results["train_builder_vllm"]["reason"]
    assert results["train_builder_vllm"]["status"] == "skipped" and reason.startswith("no ray in this environment")
    assert f"train_builder_vllm: skipped ({reason})" in out.splitlines()


def test_without_a_vllm_environment_the_engine_checks_are_skipped_saying_so(tmp_path):
    results, out = _run(tmp_path, "vllm_hf_parity", LIBRARIAN_VLLM_PYTHON=str(tmp_path / "nowhere/python"))
    reason = results["vllm_hf_parity"]["reason"]
    assert results["vllm_hf_parity"]["status"] == "skipped" and reason.startswith("no vLLM environment")
    assert str(tmp_path / "nowhere/python") in reason and f"vllm_hf_parity: skipped ({reason})" in out.splitlines()
    assert results["lora_sync"]["status"] == "skipped"  # it needs the parity check's engine
