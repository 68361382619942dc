#!/usr/bin/env bash
# A real 4-process DDP job (torchrun, Gloo, CPU) traced live: flare serve + flare agent +
# live_worker.py under flare.init(); prints each 2-s window's verdict and warnings.
# MODEL=fsdp in the environment runs the same job under FSDP2 instead of DDP.
# Uses the test venv (scripts/python-env.sh: PyTorch and Flare's Python package, installed
# once). Usage: bash scripts/real_jobs/live.sh FAULT [SLOW_RANK] [SECS]
#   FAULT: none | extra | stall | hang (see live_worker.py; a hung job is stopped 40 s
#   after the hang, with the agent's watchdog at 10 s)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FAULT="${1:?usage: live.sh none|extra|stall [SLOW_RANK] [SECS]}"
SLOW="${2:-2}"
SECS="${3:-16}"
[[ "$FAULT" == none ]] && SLOW=-1
FLARE="${FLARE_BIN:-$ROOT/target/release/flare}"
# The test venv: PyTorch and Flare's Python package (scripts/python-env.sh).
VENV="$(bash "$ROOT/scripts/python-env.sh")"
[[ -x "$FLARE" ]] || (cd "$ROOT" && cargo build --release -p flare-cli)
TMP="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; [[ -n "${KEEP:-}" ]] || rm -rf "$TMP"' EXIT
mkdir "$TMP/shm"
"$FLARE" serve --listen 127.0.0.1:0 --db "$TMP/flare.db" --token t >"$TMP/server.out" 2>"$TMP/server.log" &
for _ in $(seq 50); do [[ -s "$TMP/server.out" ]] && break; sleep 0.1; done
URL="$(head -1 "$TMP/server.out" | sed 's/listening on //')"
"$FLARE" agent --shm-dir "$TMP/shm" --node node0 --server "$URL" --token t --window 2s --poll 50ms \
    --hang-timeout 10s ${AGENT_OUT:+--out "$AGENT_OUT"} \
    >"$TMP/agent.out" 2>"$TMP/agent.log" &
PORT="$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
LIMIT=$((SECS + 120))
[[ "$FAULT" == hang ]] && LIMIT=$((SECS / 2 + 40))
if ! FLARE_SHM_DIR="$TMP/shm" SLOW_RANK="$SLOW" FAULT="$FAULT" SECS="$SECS" OMP_NUM_THREADS=1 \
    timeout -s INT "$LIMIT" "$VENV/bin/torchrun" --nproc-per-node 4 --master-port "$PORT" \
    "$ROOT/scripts/real_jobs/live_worker.py" >"$TMP/job.log" 2>&1; then
    echo "the job failed (its windows are still shown):" >&2
    grep -v Warning "$TMP/job.log" | tail -5 >&2
fi
"$VENV/bin/python" - "$URL" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def get(path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer t"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())
import time
# The agent closes the last window and pushes it: wait until the job's windows stop
# growing and the last one is analysed.
job, deadline = None, time.time() + 60
while time.time() < deadline:
    jobs = get("/api/jobs")
    if jobs and job == jobs[0] and jobs[0]["latest_analysed_window"] == jobs[0]["last_window"]:
        break
    job = jobs[0] if jobs else None
    time.sleep(2.5)
if job is None:
    sys.exit("no window reached the server")
print(f"job {job['job_id']}, windows {job['first_window']}..{job['last_window']}")
for w in range(job["first_window"], job["last_window"] + 1):
    try:
        d = get(f"/api/jobs/{job['job_id']}/findings?window={w}")
    except Exception:
        continue
    warn = [(f["kind"], [c.get("rank") for c in f["culprits"]][:3]) for f in d["findings"] if f["severity"] != "info"]
    print(w, d["verdict"], warn)
    if not warn and d["verdict"] != "inconclusive":
        # Why nothing was named: the notes and what fell below the bar.
        for f in d["findings"]:
            print("    info:", f["kind"], f["summary"][:140])
        for n in d.get("notes", [])[:3]:
            print("    note:", str(n)[:140])
    for f in d["findings"]:
        if f["kind"] == "hang":
            print("   ", f["summary"][:160], "|", f["action"][:120])
PY
