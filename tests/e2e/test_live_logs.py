"""The server says why a job died seconds after it did, from its logs alone: a real
torchrun job (4 Gloo processes, scripts/real_jobs/failure_worker.py) fails one real way
while `flare agent --logs` follows its files (torchrun's --log-dir and the console the
user redirected) and pushes to a real `flare serve`. Nothing is traced: the job does not
import Flare.

- rank 2 raises an IndexError at step 3: the server's findings name rank 2, the user's
  code and the line, within a few seconds of the job's exit;
- rank 1 stops before a collective and the others time out: the server names rank 1
  (the one that never said it waited), with the cause unknown.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from findings_schema import validate
from live_helpers import api_get, free_port

torch = pytest.importorskip("torch", reason="PyTorch not installed (scripts/python-env.sh installs it)")

ROOT = Path(__file__).resolve().parents[2]
FLARE = Path(os.environ.get("FLARE_BIN", ROOT / "target" / "release" / "flare")).resolve()
WORKER = ROOT / "scripts" / "real_jobs" / "failure_worker.py"
TOKEN = "live-logs"
JOB = "job-1234"

pytestmark = pytest.mark.skipif(
    not FLARE.exists() and os.environ.get("FLARE_E2E_REQUIRED") != "1",
    reason=f"{FLARE} not built (cargo build --release -p flare-cli)",
)


def get(url):
    return api_get(url, TOKEN)


def run_failing_job(tmp, scenario, culprit, env_extra):
    """Server, agent following tmp/logs, and the job; returns (findings url, exit time,
    processes to stop)."""
    (tmp / "shm").mkdir()
    logs = tmp / "logs"
    logs.mkdir()
    procs = []
    server = subprocess.Popen(
        [str(FLARE), "serve", "--listen", "127.0.0.1:0", "--db", str(tmp / "flare.db"), "--token", TOKEN],
        stdout=subprocess.PIPE, stderr=open(tmp / "server.log", "w"), text=True,
    )
    procs.append(server)
    line = server.stdout.readline().strip()
    assert line.startswith("listening on http://"), line
    url = line.removeprefix("listening on ")
    procs.append(subprocess.Popen(
        [str(FLARE), "agent", "--shm-dir", str(tmp / "shm"), "--job", JOB, "--node", "node0",
         "--server", url, "--token", TOKEN, "--window", "1s", "--poll", "50ms",
         "--metrics-listen", "off", "--logs", str(logs)],
        stdout=open(tmp / "agent.out", "w"), stderr=open(tmp / "agent.log", "w"),
    ))
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_extra)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
           "--master-port", str(free_port()), "--log-dir", str(logs / "torchrun"), "--redirects", "3",
           str(WORKER), scenario, "--culprit", str(culprit)]
    with open(logs / "console.log", "w") as console:
        job = subprocess.run(cmd, stdout=console, stderr=subprocess.STDOUT, env=env, timeout=240)
    assert job.returncode != 0
    return f"{url}/api/jobs/{JOB}/findings", time.time(), procs


def first_answer(findings_url, exited, want, limit=30):
    """Polls the server until its top finding is `want` (a predicate); returns the
    document and the seconds since the job exited."""
    last = None
    while time.time() < exited + limit:
        try:
            last = get(findings_url)
        except Exception:
            last = None
        if last and last["findings"] and want(last["findings"][0]):
            return last, time.time() - exited
        time.sleep(0.25)
    pytest.fail(f"no such finding {limit} s after the job exited: {json.dumps(last)[:2000] if last else None}")


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def test_the_server_names_the_rank_and_the_cause_seconds_after_the_job_died(tmp_path):
    url, exited, procs = run_failing_job(tmp_path, "exception", 2, {})
    try:
        doc, after = first_answer(
            url, exited,
            lambda f: f["kind"] == "job_failure" and f["culprits"] and f["culprits"][0].get("rank") == 2,
        )
        validate(doc)
        top = doc["findings"][0]
        assert top["failure"]["category"] == "user_code", top
        assert "IndexError" in top["failure"]["lines"][0]["text"]
        assert top["failure"]["restart_helps"] is False
        assert any(n.startswith("logs: the agents read") for n in doc["notes"]), doc["notes"]
        print(f"named {after:.1f} s after the job exited")
        assert after < 10, after
    finally:
        stop(procs)


def test_a_hung_rank_is_named_from_the_ranks_that_waited(tmp_path):
    url, exited, procs = run_failing_job(tmp_path, "hang", 1, {"FAILURE_TIMEOUT_S": "10"})
    try:
        doc, after = first_answer(
            url, exited,
            lambda f: f["culprits"] and f["culprits"][0].get("rank") == 1,
        )
        validate(doc)
        top = doc["findings"][0]
        assert top["failure"]["category"] == "unknown", top
        print(f"named {after:.1f} s after the job exited")
        assert after < 10, after
    finally:
        stop(procs)
