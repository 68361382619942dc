#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/flare/prolog.sh, PrologFlags=Alloc): starts this
# job's Flare agent on each allocated node, in the background, and returns at once. The
# agent collects only this job's traced processes (TaskProlog=task-prolog.sh gives them
# FLARE_JOB_ID=$SLURM_JOB_ID) and posts their window summaries to the server; epilog.sh
# stops it. A failure here is logged and never fails the job: tracing is not worth a
# drained node.
set -u
CONF="${FLARE_SLURM_ENV:-/etc/flare/slurm.env}"
# shellcheck source=/dev/null
[ -r "$CONF" ] && . "$CONF"
: "${SLURM_JOB_ID:?prolog.sh runs under slurmd, which sets SLURM_JOB_ID}"
FLARE_BIN="${FLARE_BIN:-/usr/local/bin/flare}"
FLARE_SHM_DIR="${FLARE_SHM_DIR:-/dev/shm/flare}"
FLARE_METRICS_LISTEN="${FLARE_METRICS_LISTEN:-off}"
FLARE_WINDOW="${FLARE_WINDOW:-10s}"
FLARE_STATE_DIR="${FLARE_STATE_DIR:-/run/flare}"
pidfile="$FLARE_STATE_DIR/agent-$SLURM_JOB_ID.pid"
log="$FLARE_STATE_DIR/agent-$SLURM_JOB_ID.log"

fail() { logger -t flare-prolog "job $SLURM_JOB_ID: $*" 2>/dev/null || echo "flare-prolog: $*" >&2; exit 0; }

[ -n "${FLARE_SERVER:-}" ] || fail "FLARE_SERVER is not set in $CONF"
[ -x "$FLARE_BIN" ] || fail "$FLARE_BIN is not executable"
mkdir -p "$FLARE_STATE_DIR" && chmod 0755 "$FLARE_STATE_DIR" || fail "cannot create $FLARE_STATE_DIR"
# Traced processes run as the job's user and must write here; the sticky bit keeps them
# from removing each other's rings.
mkdir -p "$FLARE_SHM_DIR" && chmod 1777 "$FLARE_SHM_DIR" || fail "cannot create $FLARE_SHM_DIR"
if [ -n "${FLARE_TOKEN_FILE:-}" ]; then
    [ -r "$FLARE_TOKEN_FILE" ] || fail "cannot read $FLARE_TOKEN_FILE"
    FLARE_TOKEN="$(tr -d '\r\n' < "$FLARE_TOKEN_FILE")"
fi
[ -n "${FLARE_TOKEN:-}" ] || fail "no token: set FLARE_TOKEN_FILE in $CONF"
export FLARE_TOKEN
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    exit 0 # a requeued or repeated prolog: the agent runs already
fi

# setsid: the agent outlives this script and is in no session slurmd signals.
setsid "$FLARE_BIN" agent \
    --job "$SLURM_JOB_ID" \
    --node "$(hostname -s)" \
    --server "$FLARE_SERVER" \
    --shm-dir "$FLARE_SHM_DIR" \
    --window "$FLARE_WINDOW" \
    --metrics-listen "$FLARE_METRICS_LISTEN" \
    </dev/null >>"$log" 2>&1 &
echo $! >"$pidfile"
exit 0
