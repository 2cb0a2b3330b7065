"""scripts/gpu_check.py, the check for a bare GPU machine: without a GPU it says so in one line and exits 2; its
checks run (on tiny CPU shapes, `--cpu`) with ray, verl, vLLM, DeepSpeed, xgrammar and OmegaConf hidden, and
import nothing beyond the machine's packages (torch, transformers, peft, pyarrow, numpy, PyYAML)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys

from tests.infra.cmdcheck import ROOT

SCRIPT = ROOT / "scripts/gpu_check.py"
HIDDEN = ("ray", "verl", "vllm", "deepspeed", "xgrammar", "tvm_ffi", "omegaconf", "antlr4")
BARE = {"torch", "transformers", "peft", "pyarrow", "numpy", "pyyaml"}  # the GPU machine's, with their dependencies
CHECKS = ["versions", "logprob_chunked_fp32", "logprob_chunked_bf16", "memory_2_layers", "memory_4_layers",
          "memory_grammar_chunk", "bf16_optimizer_step", "nccl_packed_weights", "memory_runtime", "rng_restored",
          "imports"]

# Runs the script in this interpreter with HIDDEN absent (every finder answers "no such module" for them) and
# prints, last, the third-party packages that librarian or the script import directly.
HARNESS = """
import importlib.abc, json, runpy, sys, sysconfig
HIDDEN, ROOT = set(json.loads(sys.argv[1])), sys.argv[2]
direct = set()


class Hide(importlib.abc.MetaPathFinder):
    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return None
        if "." not in name and name not in sys.stdlib_module_names:
            frame = sys._getframe(1)
            while frame and frame.f_code.co_filename.startswith(("<frozen", sysconfig.get_paths()["stdlib"])):
                frame = frame.f_back
            where = frame.f_code.co_filename if frame else ""
            if where.startswith((ROOT + "/librarian/", ROOT + "/scripts/")):
                direct.add(name)
        find = getattr(self.inner, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
sys.argv = [ROOT + "/scripts/gpu_check.py", *sys.argv[3:]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code
print("DIRECT " + json.dumps(sorted(direct - {"librarian", "gpu_check_cases", "gpu_check_common",
                                              "gpu_check_memory"})))
sys.exit(code)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, here or on a GPU machine


def test_without_a_gpu_it_says_so_in_one_line_and_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, env=_env(), timeout=120)
    lines = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(lines) == 1 and "no GPU visible" in lines[0], lines
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["gpu_visible"] is False and results["status"] == "no GPU visible"
    assert results["passed"] is False and results["checks"] == {} and "no GPU visible" in results["message"]


def test_the_checks_run_with_ray_verl_and_vllm_hidden_and_import_only_what_the_machine_has(tmp_path):
    proc = subprocess.run([sys.executable, "-c", HARNESS, json.dumps(HIDDEN), str(ROOT), "--cpu", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, env=_env(), timeout=420)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    shown = {m.group(2): m.group(1) for m in re.finditer(r"^(PASS|FAIL|SKIP) (\w+) ", proc.stdout, re.M)}
    assert list(shown) == CHECKS, output[-4000:]
    assert {shown[c] for c in CHECKS if c not in ("nccl_packed_weights", "memory_runtime")} == {"PASS"}
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["passed"] is True and list(results["checks"]) == sorted(CHECKS)
    assert results["checks"]["logprob_chunked_fp32"]["figures"]["max_abs_logprob_diff"] <= 1e-4
    memory = results["checks"]["memory_2_layers"]["figures"]  # measured on the CPU allocator, each ratio in bounds
    assert 0.75 <= memory["plain_ratio"] <= 1.25 and memory["configs"]["plain"]["peak"] > 0

    direct = json.loads(proc.stdout.strip().splitlines()[-1].removeprefix("DIRECT "))
    dists = importlib.metadata.packages_distributions()
    needed = {_norm(d) for name in direct for d in dists.get(name, [name])}
    bare = BARE | {_norm(r) for pkg in BARE for r in _requires(pkg)}
    assert needed <= bare, f"imported directly but not on the machine: {sorted(needed - bare)}"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requires(dist: str) -> list[str]:
    """`dist`'s own install requirements (no extras), by name."""
    reqs = importlib.metadata.requires(dist) or []
    return [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r]
