#!/usr/bin/env bash
# Runs every real job (scripts/real_jobs/jobs.py) into OUT_DIR/<job>_<fault>/ and prints
# Flare's answer beside the truth. CPU PyTorch (about 5 GB) is installed once into
# target/torch-venv; later runs reuse it. Usage: bash scripts/real_jobs/run.sh OUT_DIR
# (`run.sh --venv-only`: only make sure the venv has PyTorch).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: run.sh OUT_DIR}"
VENV="$ROOT/target/torch-venv"
TORCH="torch==2.15.0"
FLARE="${FLARE_BIN:-$ROOT/target/release/flare}"
if [[ ! -x "$VENV/bin/python" ]]; then
    mkdir -p "$ROOT/target"
    if ! python3.11 -m venv "$VENV" 2>/dev/null; then
        # Debian without python3.11-venv: a venv without pip, given the system's pip.
        rm -rf "$VENV"
        python3.11 -m venv --without-pip "$VENV"
        python3.11 -m pip --python "$VENV/bin/python" install --quiet pip
    fi
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet "$TORCH"
fi
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
