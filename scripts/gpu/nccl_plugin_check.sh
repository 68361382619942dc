#!/usr/bin/env bash
# Runs scripts/gpu/nccl_plugin_job.py on a machine with a GPU and PyTorch, and prints what
# NCCL said about the plugin. Usage: nccl_plugin_check.sh PLUGIN_SO OUT_DIR
set -euo pipefail
plugin="${1:?path to libnccl_profiler_flare.so}"
out="${2:?output directory}"
mkdir -p "$out"
nvidia-smi -L || true
PYTHONUNBUFFERED=1 timeout 480 python3 "$(dirname "$0")/nccl_plugin_job.py" "$plugin" "$out"
echo "--- what NCCL logged about the profiler"
grep -h -i "profiler" "$out"/nccl.*.log | sed 's/^[^ ]* //' | sort | uniq -c | head -20
