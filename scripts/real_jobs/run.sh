#!/usr/bin/env bash
# Runs every real job (scripts/real_jobs/jobs.py) into OUT_DIR/<job>_<fault>/ and prints
# Flare's answer beside the truth. PyTorch (about 5 GB) is installed once into the test
# venv, target/flare-venv (scripts/python-env.sh); later runs reuse it.
# Usage: bash scripts/real_jobs/run.sh OUT_DIR (`run.sh --venv-only`: only set up the venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: run.sh OUT_DIR}"
# The test venv (scripts/python-env.sh): PyTorch and Flare's Python package, installed once.
VENV="$(bash "$ROOT/scripts/python-env.sh")"
FLARE="${FLARE_BIN:-$ROOT/target/release/flare}"
[[ "$OUT" == --venv-only ]] && exit 0
[[ -x "$FLARE" ]] || (cd "$ROOT" && cargo build --release -p flare-cli)
for job_fault in ddp:none ddp:extra_work ddp:dataloader ddp:host_stall \
    allreduce:none allreduce:extra_work allreduce:late \
    fsdp:none fsdp:extra_work fsdp:dataloader fsdp:host_stall \
    pipeline:none pipeline:extra_work pipeline:dataloader pipeline:host_stall; do
    job="${job_fault%%:*}"
    fault="${job_fault#*:}"
    dir="$OUT/${job}_$fault"
    rm -rf "$dir"
    "$VENV/bin/python" "$ROOT/scripts/real_jobs/jobs.py" "$dir" "$job" "$fault" >/dev/null 2>&1
    gzip -9 -f "$dir"/traces/*.json
    echo "== $job $fault: truth $(tr -d '\n ' < "$dir/truth.json")"
    "$FLARE" diagnose "$dir/traces" 2>/dev/null | grep -E '^1\.|HEALTHY|INCONCLUSIVE' | head -1
done
