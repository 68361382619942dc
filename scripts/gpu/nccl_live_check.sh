#!/usr/bin/env bash
# A real NCCL job traced live (scripts/gpu/nccl_live_job.py) with Flare's node agent
# beside it writing 2-second window summaries and NCCL Inspector's output; packs them into
# OUT/summaries.tar.gz.
# Usage: nccl_live_check.sh PLUGIN_SO FLARE_BIN OUT_DIR
set -euo pipefail
plugin="${1:?libnccl_profiler_flare.so}"
flare="${2:?the flare binary}"
out="${3:?output directory}"
shm="$(mktemp -d /tmp/flare-live-XXXX)"
mkdir -p "$out/summaries"
"$flare" agent --shm-dir "$shm" --job gpu-live --window 2s --poll 50ms --hang-timeout 5s \
    --metrics-listen off --out "$out/summaries" --inspector-out "$out/inspector" \
    >"$out/agent.log" 2>&1 &
agent=$!
PYTHONUNBUFFERED=1 timeout 300 python3 "$(dirname "$0")/nccl_live_job.py" "$plugin" "$shm" 12
sleep 3
kill -INT "$agent"
wait "$agent" || true
tar czf "$out/summaries.tar.gz" -C "$out" summaries inspector
rm -rf "$out/summaries" "$out/inspector"
tail -5 "$out/agent.log"
