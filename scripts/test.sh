#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of the workspace.
# Installs nothing today; later parts (Python, NATS, a browser) install themselves here,
# idempotently.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d ../shared/data ]; then
  echo "warning: ../shared/data not found; tests that read the shared real data will fail" >&2
fi
cargo fmt --all -- --check
cargo clippy --workspace --release --all-targets -- -D warnings
cargo test --workspace --release
