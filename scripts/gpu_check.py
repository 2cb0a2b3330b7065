#!/usr/bin/env python3
"""The learner's GPU path, checked on the first GPU machine at hand in at most 3 minutes.

    python3 scripts/gpu_check.py [--out DIR]      (default build/gpu_check)

Needs only Python 3.12, a CUDA build of torch, transformers, peft, pyarrow, numpy and PyYAML: no network, no
install, no ray, vLLM, verl, DeepSpeed or OmegaConf. This checkout is put first on sys.path, not installed.
docs/cluster.md ("The GPU check") explains it.

One line per check, `PASS|FAIL|SKIP name  figure vs threshold; ...`, in this order:
  versions              torch, CUDA, NCCL, driver, GPU; needs NCCL in torch and bf16 support
  logprob_chunked_fp32  Learner.token_stats chunked (packed grammar masks unpacked per chunk on the GPU) against
                        the whole batch (dense masks): max |log-prob diff| and max |grad diff| / max |grad|
  logprob_chunked_bf16  the same under precision bf16 (looser thresholds: one bf16 rounding of a logit)
  memory_2_layers       Qwen2-7B's shape cut to 2 layers, LoRA, bf16, two 16k-token micro-batches: the update's
                        peak (torch.cuda.max_memory_allocated by phase) against the estimate `librarian plan`
                        uses, with gradient checkpointing, without, and without on padded rows; the memory
                        checkpointing saves; the weights. Each ratio within 0.75..1.25
  memory_4_layers       the same at 4 layers, and the cost of one layer (4 against 2) against the estimate's
  memory_grammar_chunk  one 1,024-row log-prob chunk at a 152k vocabulary, every row under a grammar: its forward
                        and backward peaks against the estimate's chunk
  bf16_optimizer_step   full weights, lr 1e-6: float32 masters, bf16 autocast, every tensor moved
  nccl_packed_weights   torch.cuda.nccl on one rank: init, all-reduce and broadcast of the packed weight
                        buffers the NCCL sender uses; every tensor unpacks bit for bit
  memory_runtime        device memory outside torch's pool plus the pool's slack at the peaks, at most the
                        estimate's fixed runtime term
  rng_restored          building a learner leaves the CPU and CUDA generators as they were
  imports               none of ray, vllm, verl, deepspeed, xgrammar, omegaconf was imported
OUT/results.json holds every figure, written after each check. Exit status: 0 all passed (SKIPs allowed only
with --cpu); 1 a check failed or the time ran out; 2 no GPU visible (one line says so, nothing else is printed).
--cpu runs the same checks on tiny shapes on the CPU, memory measured through the profiler (the script's own
test; not a verdict on any GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 180  # the whole run, checks included


def write(out: Path, results: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True, default=str))


def gpu_visible() -> tuple[bool, str]:
    """Whether torch sees a CUDA device, and why not (torch's own warning, e.g. an old driver, is kept)."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        visible = torch.cuda.is_available() and torch.cuda.device_count() > 0
    why = "; ".join(str(w.message).splitlines()[0] for w in caught)
    build = torch.version.cuda or "none (a CPU build)"
    return visible, (f"torch {torch.__version__}, CUDA build {build}, CUDA_VISIBLE_DEVICES="
                     f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}" + (f"; {why}" if why else ""))


def run_checks(out: Path, results: dict[str, Any], cpu: bool) -> int:
    import torch

    sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]  # this checkout's librarian, imported only now
    checks: dict[str, Any] = results.setdefault("checks", {})
    try:
        import gpu_check_cases as cases  # noqa: PLC0415  (needs the sys.path above; imports torch)
    except Exception as exc:  # noqa: BLE001 - a machine without what the checks import: say which, in results.json
        checks["import"] = {"status": "FAIL", "text": f"the checks cannot be imported: {type(exc).__name__}: {exc}",
                            "trace": traceback.format_exc()[-4000:]}
        print(f"FAIL {'import':<22} {checks['import']['text']}", flush=True)
        return 1

    ctx = cases.Context(torch.device("cpu") if cpu else torch.device("cuda", 0), tiny=cpu)
    running: list[str] = []

    def out_of_time() -> None:
        name = running[-1] if running else "the run"
        checks[name] = {"status": "FAIL", "text": f"timed out: the run passed {LIMIT_S} s"}
        results.update(passed=False, finished=time.strftime("%Y-%m-%d %H:%M:%S"))
        write(out, results)
        print(f"FAIL {name:<22} timed out: the whole check may take {LIMIT_S} s", flush=True)
        os._exit(1)

    watchdog = threading.Timer(LIMIT_S - (time.perf_counter() - results["_start"]), out_of_time)
    watchdog.daemon = True
    watchdog.start()
    for name, check in cases.CHECKS:
        running.append(name)
        began = time.perf_counter()
        try:
            outcome = check(ctx)
            entry = {"status": outcome.status, "text": outcome.text, "figures": outcome.figures}
        except Exception as exc:  # noqa: BLE001 - one failed check must not hide the others
            entry = {"status": "FAIL", "text": f"error: {type(exc).__name__}: {exc}"[:400],
                     "trace": traceback.format_exc()[-4000:]}
        entry["seconds"] = round(time.perf_counter() - began, 2)
        checks[name] = entry
        print(f"{entry['status']} {name:<22} {entry['text']}", flush=True)
        write(out, {k: v for k, v in results.items() if not k.startswith("_")})
    watchdog.cancel()
    allowed = {"PASS", "SKIP"} if cpu else {"PASS"}
    return 0 if all(c["status"] in allowed for c in checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "build" / "gpu_check"), help="folder for results.json")
    parser.add_argument("--cpu", action="store_true", help="self-test on the CPU with tiny shapes")
    args = parser.parse_args(argv)
    out = Path(args.out)
    for key, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(key, value)
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "_start": time.perf_counter(),
                               "mode": "cpu self-test" if args.cpu else "gpu", "limit_s": LIMIT_S}
    try:
        visible, why = gpu_visible()
    except ImportError as exc:
        print(f"FAIL torch is not importable: {exc}")
        write(out, {**{k: v for k, v in results.items() if not k.startswith("_")}, "passed": False,
                    "error": f"torch is not importable: {exc}"})
        return 1
    results["gpu_visible"] = visible
    if not visible and not args.cpu:
        message = f"no GPU visible ({why}): nothing was checked"
        print(message)
        write(out, {**{k: v for k, v in results.items() if not k.startswith("_")}, "passed": False,
                    "status": "no GPU visible", "message": message, "checks": {}})
        return 2
    code = run_checks(out, results, args.cpu)
    results.update(passed=code == 0, finished=time.strftime("%Y-%m-%d %H:%M:%S"),
                   seconds=round(time.perf_counter() - results["_start"], 1))
    write(out, {k: v for k, v in results.items() if not k.startswith("_")})
    failed = [n for n, c in results["checks"].items() if c["status"] == "FAIL"]
    print(f"{'passed' if code == 0 else 'FAILED: ' + ', '.join(failed)} in {results['seconds']} s; "
          f"wrote {out / 'results.json'}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
