#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the dashboard's browser test, installed once
# (idempotent: nothing is done when both are there). Prints the two paths.
set -euo pipefail
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
fi
command -v chromium
command -v chromedriver
