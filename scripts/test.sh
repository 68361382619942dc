#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of the workspace.
# Installs what it needs itself, idempotently: a Python venv under target/ with the
# pinned tools (maturin, pytest, numpy, py-spy, jsonschema) and Flare's Python package
# (scripts/python-env.sh), Debian's chromium and chromium-driver
# (scripts/browser-env.sh), Debian's nats-server, and Debian's postgresql, of which it
# runs a private, throw-away server for the PostgreSQL and scale-out tests
# (scripts/postgres-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/data ]; then
  echo "warning: ../shared/data not found; tests that read the shared real data will fail" >&2
fi
cargo fmt --all -- --check
# The venv, PyTorch and the pinned Python tools install (mostly downloading and unpacking)
# while the Rust build below runs; the extension is built after it.
py_log=$(mktemp /tmp/flare-python-env.XXXXXX)
setsid bash scripts/python-env.sh --deps-only >"$py_log" 2>&1 &
py_deps=$!
pg_dir=""
trap 'kill -- -"$py_deps" 2>/dev/null || true; [ -z "$pg_dir" ] || bash scripts/postgres-env.sh --stop "$pg_dir"' EXIT
cargo clippy --workspace --release --all-targets -- -D warnings
# Debian's nats-server (JetStream), which the scale-out test starts itself.
command -v nats-server >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >/dev/null
}
pg_dir=$(mktemp -d /tmp/flare-pg.XXXXXX)
FLARE_TEST_POSTGRES=$(bash scripts/postgres-env.sh "$pg_dir")
export FLARE_TEST_POSTGRES
FLARE_E2E_REQUIRED=1 cargo test --workspace --release
# HTTPS (the `tls` features, off in the default build): the server's listener and the
# agent's client, with certificates made by openssl.
# systemd-analyze checks the unit files in deploy/systemd (tests/e2e/test_deploy.py).
missing_debs=()
command -v openssl >/dev/null || missing_debs+=(openssl)
command -v systemd-analyze >/dev/null || missing_debs+=(systemd)
if ((${#missing_debs[@]})); then
  apt-get update -qq && apt-get install -y -qq "${missing_debs[@]}" >/dev/null
fi
cargo clippy --release -p flare-server --features tls,flare-agent/tls --all-targets -- -D warnings
cargo test --release -p flare-server --features tls,flare-agent/tls --test tls
# The Python package, and the end-to-end test of a live job (server + agent + 8 traced
# processes), which runs the `flare` binary that `cargo test --release` just built.
wait "$py_deps" || { cat "$py_log" >&2; echo "scripts/python-env.sh --deps-only failed" >&2; exit 1; }
bash scripts/python-env.sh >/dev/null
# Debian's Chromium and ChromeDriver, for the dashboard's browser test.
bash scripts/browser-env.sh >/dev/null
FLARE_BIN="${CARGO_TARGET_DIR:-target}/release/flare" FLARE_E2E_REQUIRED=1 \
  target/flare-venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 crates/flare-py/tests tests/e2e
