#!/usr/bin/env bash
# GPU telemetry on a real GPU in one short call (issue 32 item 3; docs/telemetry.md, "On a real GPU").
#
#   scripts/gpu-check.sh --prepare        # HERE, with a package index: nvidia-ml-py into .gpu-check/site (pure Python)
#   scripts/gpu-check.sh [ARGS ...]       # THERE, on the lent GPU machine (no package index): ARGS go to gpu_check.py
#
# The lent machine reaches no package index, so what the check needs travels with the working tree: the folder
# .gpu-check/ (ignored by git: name it in the device tool's `carry`) holds nvidia-ml-py installed with
# `pip install --target`; the check loads infermatrix's own NVML reader from src/ by path, so nothing else is needed
# (the load is a PTX loop through libcuda by ctypes: no torch, no CUDA toolkit). A device call is then:
#   run(command="scripts/gpu-check.sh --json $OUT/gpu-check.json", carry=[".gpu-check"], timeout_s=300)
# 60 s idle + 60 s under load + start-up: about 2½ minutes. Figures go to stdout (and --json FILE).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${INFERMATRIX_GPU_CHECK_DIR:-$ROOT/.gpu-check}"
PY="${PYTHON:-python3}"

if [[ "${1:-}" == "--prepare" ]]; then
    mkdir -p "$DIR"
    "$PY" -m pip install --quiet --target "$DIR/site" "nvidia-ml-py>=12"
    grep -qx '/.gpu-check/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.gpu-check/' >> "$(git -C "$ROOT" rev-parse --git-path info/exclude)"
    echo "gpu-check: prepared $DIR/site ($(du -sh "$DIR" | cut -f1)); carry .gpu-check to the GPU machine" >&2
    exit 0
fi

export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$DIR/site"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader || true
exec "$PY" "$ROOT/scripts/gpu_check.py" "$@"
