#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/flare/epilog.sh): stops this job's Flare agent on
# the node. SIGTERM makes the agent summarise what it still holds and deliver it (its
# shutdown deadline is 10 s); after 20 s it is killed. Never fails the job.
set -u
CONF="${FLARE_SLURM_ENV:-/etc/flare/slurm.env}"
# shellcheck source=/dev/null
[ -r "$CONF" ] && . "$CONF"
: "${SLURM_JOB_ID:?epilog.sh runs under slurmd, which sets SLURM_JOB_ID}"
FLARE_STATE_DIR="${FLARE_STATE_DIR:-/run/flare}"
pidfile="$FLARE_STATE_DIR/agent-$SLURM_JOB_ID.pid"
[ -f "$pidfile" ] || exit 0
pid="$(cat "$pidfile")"
if kill -TERM "$pid" 2>/dev/null; then
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL "$pid" 2>/dev/null
fi
rm -f "$pidfile"
exit 0
