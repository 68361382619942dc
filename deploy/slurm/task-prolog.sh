#!/bin/bash
# Slurm TaskProlog (slurm.conf: TaskProlog=/etc/flare/task-prolog.sh): what it prints as
# `export NAME=value` enters every task's environment. Tells the tracer (flare.init())
# which job it belongs to and where the node's agent reads rings, whatever launcher
# (torchrun's own run id included) runs inside the allocation.
CONF="${FLARE_SLURM_ENV:-/etc/flare/slurm.env}"
# shellcheck source=/dev/null
[ -r "$CONF" ] && . "$CONF"
echo "export FLARE_JOB_ID=${SLURM_JOB_ID}"
echo "export FLARE_SHM_DIR=${FLARE_SHM_DIR:-/dev/shm/flare}"
