#!/usr/bin/env bash
# Fetches the wheels scripts/gpu_check.py needs on a bare GPU machine (scripts/gpu_check_wheels.txt) into DIR
# (default build/gpu_check_wheels), on a machine with a network; carry DIR over and install them there with
#   python -m pip install --no-index --no-deps DIR/*.whl
# PIP (default "python3 -m pip") is the pip to fetch with. Wheels are pure Python, so any Python 3 will do.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-build/gpu_check_wheels}"
PIP="${PIP:-python3 -m pip}"
mkdir -p "$DIR"
mapfile -t WANTED < <(grep -v '^#' scripts/gpu_check_wheels.txt | awk 'NF {print $1}')
$PIP wheel --no-deps --wheel-dir "$DIR" "${WANTED[@]}"
total=$(find "$DIR" -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
echo "gpu_check wheels: ${#WANTED[@]} in $DIR, $total bytes (limit $((60 << 20)))"
[ "$total" -le $((60 << 20)) ] || { echo "gpu_check wheels: more than 60 MiB" >&2; exit 1; }
