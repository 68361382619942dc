#!/usr/bin/env bash
# Sets up the Python environment of the `flare` package (crates/flare-py) and prints its
# path. Idempotent and quick on re-runs:
#   - creates the venv target/flare-venv with python3.11 (or $PYTHON) if it is missing;
#   - pip-installs the pinned tools and PyTorch below only when a version is missing or
#     differs (no network when everything is there);
#   - builds the extension with maturin and installs the wheel into the venv, unless
#     nothing it is built from changed since the last install (FLARE_PY_REBUILD=1 forces).
# Respects CARGO_TARGET_DIR. `--deps-only` stops before the extension. Usage:
#   bash scripts/python-env.sh && target/flare-venv/bin/python -m pytest -q crates/flare-py/tests
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/target/flare-venv"
PY_BIN="${PYTHON:-python3.11}"
CRATE="$ROOT/crates/flare-py"
# Pinned tool versions (bump deliberately). kubernetes-validate (Kubernetes' own schemas,
# bundled) checks the manifests in deploy/; opentelemetry-proto the agent's OTLP export.
# PyTorch (CPU-capable, about 5 GB with the CUDA libraries the registry's wheel brings;
# about 3 minutes) is for the real-job tests: real DDP jobs traced live, and
# scripts/real_jobs. Installed once; later runs only check it.
PINS=("maturin==1.16.0" "pytest==9.2.0" "numpy==2.4.6" "py-spy==0.4.3" "jsonschema==4.26.0"
    "kubernetes-validate==1.37.0" "opentelemetry-proto==1.45.2" "torch==2.15.0")

say() { echo "python-env: $*" >&2; }
die() { say "error: $*"; exit 1; }

command -v "$PY_BIN" >/dev/null 2>&1 || die "$PY_BIN not found (set PYTHON=/path/to/python3.11)"
command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs)"

# --- the venv -------------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating $VENV with $PY_BIN"
    mkdir -p "$ROOT/target"
    if ! "$PY_BIN" -m venv "$VENV" 2>/dev/null; then
        # Debian without python3.X-venv has no ensurepip: make the venv without pip and
        # give it one with the interpreter's own pip (pip >= 22.3 can target another env).
        rm -rf "$VENV"
        "$PY_BIN" -m venv --without-pip "$VENV" \
            || die "'$PY_BIN -m venv' failed (on Debian: apt-get install python3.11-venv)"
        "$PY_BIN" -m pip --python "$VENV/bin/python" install --quiet pip \
            || die "no pip for the venv: install python3.11-venv or python3-pip"
    fi
fi
VPY="$VENV/bin/python"

# --- pinned tools, installed only when missing ---------------------------------------
# One interpreter start for all checks: prints the pins whose version is not installed.
mapfile -t missing < <("$VPY" - "${PINS[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have != want:
        print(pin)
PY
)
if ((${#missing[@]})); then
    # PyTorch with its CUDA libraries takes about 6 GB installed, and pip holds all the
    # downloaded wheels (about 3 GB) until it has installed them: say so up front rather
    # than failing halfway with pip's "No space left on device". The wheels go under
    # target/ (not /tmp, which may be a small tmpfs) so that the check measures the disk
    # that fills. No pip cache: it would keep a second copy of every wheel.
    pip_tmp="$ROOT/target/tmp/pip"
    mkdir -p "$pip_tmp"
    need_kb=$((9 * 1024 * 1024))
    free_kb="$(df -Pk "$pip_tmp" | awk 'NR == 2 { print $4 }')"
    if [[ " ${missing[*]} " == *" torch=="* && -n "$free_kb" ]] && ((free_kb < need_kb)); then
        die "$((free_kb / 1024)) MiB free under $ROOT/target; installing PyTorch needs about 9 GiB"
    fi
    say "installing ${missing[*]}"
    TMPDIR="$pip_tmp" "$VPY" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
        "${missing[@]}"
    rm -rf "$pip_tmp"
fi

# --deps-only: the venv and the pinned tools, not the extension (scripts/test.sh installs
# them while the Rust build runs, and builds the extension after it).
if [[ "${1:-}" == --deps-only ]]; then
    echo "$VENV"
    exit 0
fi

# --- the extension -------------------------------------------------------------------
# Rebuild when any input is newer than the stamp written after the last install: this
# crate's Rust and Python sources and manifests (not its tests), the crates it links, and
# the workspace manifests.
STAMP="$VENV/.flare-py-installed"
inputs=("$CRATE/src" "$CRATE/python" "$CRATE/Cargo.toml" "$CRATE/pyproject.toml" "$CRATE/README.md"
    "$ROOT/crates/flare-tracer/src" "$ROOT/crates/flare-tracer/Cargo.toml"
    "$ROOT/crates/flare-capi/src" "$ROOT/crates/flare-capi/Cargo.toml"
    "$ROOT/crates/flare-model/src" "$ROOT/crates/flare-model/Cargo.toml"
    "$ROOT/Cargo.toml" "$ROOT/Cargo.lock")
stale=1
if [[ -f "$STAMP" && "${FLARE_PY_REBUILD:-0}" != 1 ]] \
    && "$VPY" -c 'import flare._native' >/dev/null 2>&1; then
    newer="$(find "${inputs[@]}" -newer "$STAMP" -not -path '*/__pycache__*' \
        -not -path '*/.pytest_cache*' -print -quit 2>/dev/null || true)"
    [[ -z "$newer" ]] && stale=0
fi
if ((stale)); then
    say "building the flare extension (release)"
    WHEELS="$ROOT/target/flare-wheels"
    rm -rf "$WHEELS"
    # Touch the stamp before building: a source edited during the build makes the next
    # run rebuild instead of being hidden by a stamp newer than the edit.
    touch "$STAMP.next"
    VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" \
        "$VENV/bin/maturin" build --release --quiet -i "$VPY" \
        -m "$CRATE/Cargo.toml" -o "$WHEELS" >&2
    shopt -s nullglob
    wheels=("$WHEELS"/flare_tracer-*.whl)
    shopt -u nullglob
    ((${#wheels[@]} == 1)) || die "expected one wheel in $WHEELS, found ${#wheels[@]}"
    "$VPY" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
        --force-reinstall "${wheels[0]}"
    mv "$STAMP.next" "$STAMP"
fi

"$VPY" -c 'import flare, flare._native' || die "the installed flare package does not import"
echo "$VENV"
